"""The core, ``layernorm_methods``, without fairseq: every registered method builds, trains a
step and stays finite in a Python where ``fairseq`` (and the plugin) cannot be imported, and no
module of the core imports either; its code parses with Python 3.9's grammar and postpones its
``X | None`` annotations (what ``requires-python >= 3.9`` promises; CI runs 3.11 only)."""

import ast
import os
import subprocess
import sys

from conftest import REPO

CORE = REPO / "layernorm_methods"
FAIRSEQ = ("fairseq", "fairseq_cli", "fairseq_layernorm_plugins")

# runs first in the child (python -c): any import of fairseq or the plugin raises ImportError
BLOCK_FAIRSEQ = f"""
import importlib.abc
import sys


class NoFairseq(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {FAIRSEQ!r}:
            raise ImportError(f"{{name}} is blocked: the core must run without fairseq")
        return None


sys.meta_path.insert(0, NoFairseq())
"""

TRAIN_EVERY_METHOD = """
import math

import torch

import layernorm_methods

try:
    import fairseq  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("the blocker let fairseq in")
assert layernorm_methods.__file__.startswith(sys.argv[1]), layernorm_methods.__file__
SIZES = dict(embed_dim=16, ffn_embed_dim=32, attention_heads=2)


def batch(kind):
    '''(model inputs, targets): padding (index 1) on the source's left, the targets' right.'''
    if kind == "translation":
        src, prev = torch.randint(4, 40, (3, 7)), torch.randint(4, 30, (3, 6))
        src[0, :2] = 1
        target = torch.cat([prev[:, 1:], torch.full((3, 1), 2)], dim=1)
        prev[1, -2:], target[1, -3:] = 1, 1
        return (src, prev), target
    tokens = torch.randint(4, 40, (3, 9))
    tokens[2, -3:] = 1
    return (tokens[:, :-1],), tokens[:, 1:]


def step(name, kind):
    torch.manual_seed(0)
    if kind == "translation":
        model = layernorm_methods.build_model(name, 40, 30, encoder_layers=2, decoder_layers=3, **SIZES)
    else:
        model = layernorm_methods.build_language_model(name, 40, layers=3, **SIZES)
    inputs, target = batch(kind)
    if name == "admin":  # Admin's omegas come from a profiling pass
        from layernorm_methods.admin import profile_admin_

        profile_admin_(model, [inputs])
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    before = [p.detach().clone() for p in model.parameters()]
    losses = []
    for _ in range(2):
        logits = model(*inputs)
        assert logits.shape == (*target.shape, model.decoder.output_projection.out_features), logits.shape
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=1)
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        for p_name, p in model.named_parameters():
            assert p.grad is None or torch.isfinite(p.grad).all(), f"{name} {kind}: {p_name} grad not finite"
        optimizer.step()
    assert all(math.isfinite(x) for x in losses), f"{name} {kind}: losses {losses}"
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters())), f"{name} {kind}: nothing moved"
    return losses


names = layernorm_methods.method_names()
for name in names:
    for kind in ("translation", "lm"):
        print(name, kind, step(name, kind))
leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("fairseq", "fairseq_cli", "fairseq_layernorm_plugins"))
assert not leaked, leaked
print("trained", " ".join(names))
"""


def test_every_method_trains_without_fairseq():
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))  # this checkout's core
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", BLOCK_FAIRSEQ + TRAIN_EVERY_METHOD, str(CORE)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    trained = proc.stdout.strip().splitlines()[-1].split()[1:]
    assert {"postln", "preln", "b2t"} <= set(trained), proc.stdout


def imported_modules(tree):
    """Every module an ``import`` / ``from ... import`` names (absolute ones), and every string
    passed to ``importlib.import_module`` / ``__import__``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                yield node.args[0].value


def core_modules():
    files = sorted(CORE.rglob("*.py"))
    assert CORE / "methods" / "b2t.py" in files
    return files


def test_no_core_module_imports_fairseq():
    found = {
        f"{path.relative_to(REPO)}: {name}"
        for path in core_modules()
        for name in imported_modules(ast.parse(path.read_text(), str(path)))
        if name.split(".")[0] in FAIRSEQ
    }
    assert not found, sorted(found)


def test_the_scan_sees_imports():
    tree = ast.parse(
        "import fairseq.models\nfrom fairseq_layernorm_plugins import x\nimportlib.import_module('fairseq_cli')"
    )
    assert list(imported_modules(tree)) == ["fairseq.models", "fairseq_layernorm_plugins", "fairseq_cli"]


def has_union_annotation(tree):
    annotations = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            annotations.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            annotations.append(node.returns)
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) for a in annotations for n in ast.walk(a))


def test_core_code_is_python_3_9():
    """Python 3.9's grammar; an ``X | None`` annotation (3.10 at run time) only under
    ``from __future__ import annotations``, which leaves it unevaluated."""
    late = []
    for path in core_modules():
        tree = ast.parse(path.read_text(), str(path), feature_version=(3, 9))
        postponed = any(
            isinstance(node, ast.ImportFrom)
            and node.module == "__future__"
            and any(a.name == "annotations" for a in node.names)
            for node in tree.body
        )
        if has_union_annotation(tree) and not postponed:
            late.append(str(path.relative_to(REPO)))
    assert not late, f"`X | None` annotations evaluated at run time (3.10+): {late}"
