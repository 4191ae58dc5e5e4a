"""A venv shaped like a GPU node, for the bundle's install test (tests/test_gpu_install.py):
pip and the named distributions with what they require, no more, taken from this
interpreter's environment as they are installed here, file by file as hard links (seconds;
``pip install`` of the same packages unpacks a gigabyte of torch again: half a minute of CPU).

Nothing done in the node changes this environment's files: pip unlinks a file before writing
one of the same name (and an uninstall removes links), and Python writes bytecode to a new
file renamed into place. Files a distribution installed outside site-packages (console
scripts) are left out."""

import os
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def closure(names):
    """{canonical name: Distribution} of ``names`` and, recursively, what they require here
    (requirements without an extra whose markers hold on this machine)."""
    found, todo = {}, list(names)
    while todo:
        dist = distribution(todo.pop())
        name = canonicalize_name(dist.metadata["Name"])
        if name in found:
            continue
        found[name] = dist
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return found


def site_packages(python):
    """The purelib folder of ``python``'s environment."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.check_output([python, "-c", code], text=True).strip())


def node_venv(path, names):
    """A venv at ``path`` (``--without-pip``) holding pip, ``names`` and their requirements,
    hard-linked from this environment; returns (its python, {canonical name: version})."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", path], check=True)
    python = Path(path) / "bin" / "python"
    site = site_packages(python)
    dists = closure(["pip", *names])
    for dist in dists.values():
        root = Path(dist.locate_file("")).resolve()
        if dist.files is None:
            raise RuntimeError(f"{dist.metadata['Name']}: no RECORD, its files unknown")
        for file in dist.files:
            source = Path(dist.locate_file(file)).resolve()
            if source.is_relative_to(root) and source.is_file():
                target = site / source.relative_to(root)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(source, target)
    return python, {name: dist.version for name, dist in dists.items()}
