"""Outputs written atomically: every table, plot, checkpoint, results file and prepared
data directory is written under a temporary name beside its destination and renamed into
place once complete, so that a crash, bad input or a concurrent reader never meets a
half-written one."""

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary ``Path`` beside ``path`` for the block to write; it keeps ``path``'s
    suffix (``savefig`` and ``tarfile`` read the format from it) and names this process (two
    writers never share one). When the block completes it replaces ``path``; when the block
    raises it is removed and ``path`` stays as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path, text):
    """Write ``text`` (UTF-8) to ``path`` atomically; returns ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path, data, indent=1):
    """Write ``data`` as JSON to ``path`` atomically; returns ``path``."""
    return write_text(path, json.dumps(data, indent=indent) + "\n")


@contextlib.contextmanager
def atomic_directory(destination, check=None):
    """Yield a temporary directory beside ``destination``; rename it into place (replacing
    any old ``destination``) only if the block completes, so a failure never leaves a
    half-written ``destination``. The old one is renamed aside first and removed after, so
    that it is never seen half-removed either. ``check(destination)``, if given, runs just
    before the old one is set aside: when it raises, nothing is replaced (the new one is
    removed, the old one stays as it was), e.g. because the old one holds files its writer
    must not delete."""
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{destination.name}.tmp-", dir=destination.parent))
    old = tmp.with_name(tmp.name.replace(".tmp-", ".old-", 1))
    try:
        yield tmp
        if check is not None:
            check(destination)
        if destination.exists():
            os.replace(destination, old)
        os.replace(tmp, destination)
    finally:
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover, ignore_errors=True)
