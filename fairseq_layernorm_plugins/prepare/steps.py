"""Resumable preparation: each step writes its own directory atomically with a stamp
(a hash of its inputs' checksums and its options); a re-run skips every step whose
stamp still matches, ``force=True`` redoes them all. Preparations of one output
directory run one at a time (:func:`one_at_a_time`), also from separate processes."""

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from fairseq_layernorm_plugins.atomic import atomic_directory
from fairseq_layernorm_plugins.prepare.textio import DataError

logger = logging.getLogger(__name__)
STAMP = ".stamp"
_held = {}  # lock file -> how deep this process holds it


@contextlib.contextmanager
def exclusive(lock_file):
    """Hold an exclusive lock on ``lock_file`` (created if missing) against every other
    process; re-entrant within this process, so nested preparations share one lock."""
    lock_file = Path(lock_file).resolve()
    if lock_file in _held:
        _held[lock_file] += 1
        try:
            yield
        finally:
            _held[lock_file] -= 1
        return
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("%s: another process is preparing this data; waiting for it", lock_file)
            fcntl.flock(handle, fcntl.LOCK_EX)
        _held[lock_file] = 1
        try:
            yield
        finally:
            del _held[lock_file]
            fcntl.flock(handle, fcntl.LOCK_UN)


def one_at_a_time(prepare):
    """Decorate a ``prepare(out_dir, ...)``: calls for the same ``out_dir`` (two training
    commands started together) run one after the other, holding OUT_DIR.lock, instead of
    racing over the shared OUT_DIR.work; the later one finds the data up to date."""

    @functools.wraps(prepare)
    def locked(out_dir, *args, **kwargs):
        with exclusive(Path(out_dir).with_name(Path(out_dir).name + ".lock")):
            return prepare(out_dir, *args, **kwargs)

    return locked


def file_checksum(path):
    """sha256 of a file's bytes."""
    if not Path(path).is_file():
        raise DataError(f"{path}: file not found")
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Done:
    """A finished step: its directory and the key that stamps it."""

    path: Path
    key: str


class Steps:
    """``steps.run(name, build, inputs=..., options=...)`` runs ``build(tmp_dir)`` into
    ``work_dir/name`` unless that directory's stamp already equals the key of
    (name, input keys, options). Inputs are earlier ``Done`` steps or files."""

    def __init__(self, work_dir, force=False):
        self.work_dir = Path(work_dir)
        self.force = force

    @staticmethod
    def key(name, inputs=(), options=None):
        parts = [item.key if isinstance(item, Done) else file_checksum(item) for item in inputs]
        blob = json.dumps([name, parts, options], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    def run(self, name, build, inputs=(), options=None):
        key = self.key(name, inputs, options)
        out = self.work_dir / name
        stamp = out / STAMP
        if not self.force and stamp.is_file() and stamp.read_text() == key:
            logger.info("%s: up to date, skipped", name)
            return Done(out, key)
        logger.info("%s ...", name)
        start = time.perf_counter()
        with atomic_directory(out) as tmp:
            build(tmp)
            (tmp / STAMP).write_text(key)
        logger.info("%s: done in %.1f s", name, time.perf_counter() - start)
        return Done(out, key)

    def clean(self):
        shutil.rmtree(self.work_dir, ignore_errors=True)
