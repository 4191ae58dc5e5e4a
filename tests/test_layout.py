"""The package's import graph has no cycles: each module imports only what sits below it
(imports inside functions count too, since they only hide a cycle)."""

import ast

from conftest import REPO

PACKAGE = "fairseq_layernorm_plugins"


def module_name(path):
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(node, name, is_package, modules):
    """The package modules an import statement of module ``name`` reads: ``from P import m``
    reads module ``P.m`` when there is one (P's own ``__init__`` runs for any ``P.x``, as
    the parent of every import, so it is no edge), else ``P``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's package
        package = name if is_package else name.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}".rstrip(".")
    names = [f"{base}.{alias.name}" for alias in node.names]
    return [n for n in names if n in modules] or [base]


def import_graph():
    """{module: the package's modules it imports}."""
    files = {module_name(path): path for path in (REPO / PACKAGE).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                found = imported(node, name, path.name == "__init__.py", files)
                targets.update(t for t in found if t in files)
        graph[name] = targets - {name}
    return graph


def cycles(graph):
    """Every import cycle (as a list of modules), found by depth-first search."""
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_import_graph_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_package_has_no_import_cycles():
    graph = import_graph()
    assert f"{PACKAGE}.models.transformer_admin" in graph  # the walk found the package
    assert cycles(graph) == []


def test_setup_py_is_a_shim_over_pyproject():
    """``python setup.py ...`` habits work, and read the metadata pyproject.toml holds."""
    import subprocess
    import sys
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    out = subprocess.run(
        [sys.executable, str(REPO / "setup.py"), "--name", "--version"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[-2:] == [project["name"], project["version"]]
