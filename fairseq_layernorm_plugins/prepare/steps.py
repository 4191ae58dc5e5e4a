"""Resumable preparation: each step writes its own directory atomically with a stamp
(a hash of its inputs' keys and its options). Steps are built lazily: a step's key is
known from its inputs' keys before anything runs, so a recipe first compares the key of
its output with the output's stamp and, when they match, builds nothing, even after
its work directory was removed; otherwise :meth:`Step.ready` builds what the output
reads, skipping every step whose stamp still matches (an interrupted run resumes).
``force=True`` redoes them all. Preparations of one output directory run one at a time
(:func:`one_at_a_time`), also from separate processes."""

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import shutil
import time
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


class Step:
    """One step: the directory it writes (``path``) and the key that stamps it. Nothing is
    built until :meth:`ready`; a step whose stamp already held its key has nothing to build."""

    def __init__(self, path, key, build=None, inputs=()):
        self.path, self.key = Path(path), key
        self._build, self._inputs = build, inputs

    def ready(self):
        """Build this step, after the steps it reads, unless it is built; returns ``path``."""
        if self._build is not None:
            for item in self._inputs:
                if isinstance(item, Step):
                    item.ready()
            logger.info("%s ...", self.path.name)
            start = time.perf_counter()
            with atomic_directory(self.path) as tmp:
                self._build(tmp)
                (tmp / STAMP).write_text(self.key)
            logger.info("%s: done in %.1f s", self.path.name, time.perf_counter() - start)
            self._build = None
        return self.path


class Steps:
    """``steps.run(name, build, inputs=..., options=...)`` is the step that writes
    ``work_dir/name`` with ``build(tmp_dir)``, keyed by (name, input keys, options); its
    stamp is compared now, the build waits for :meth:`Step.ready`. Inputs are earlier
    steps or files."""

    def __init__(self, work_dir, force=False):
        self.work_dir = Path(work_dir)
        self.force = force

    @staticmethod
    def key(name, inputs=(), options=None):
        parts = [item.key if isinstance(item, Step) else file_checksum(item) for item in inputs]
        blob = json.dumps([name, parts, options], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    def run(self, name, build, inputs=(), options=None):
        key = self.key(name, inputs, options)
        out = self.work_dir / name
        stamp = out / STAMP
        if not self.force and stamp.is_file() and stamp.read_text() == key:
            logger.info("%s: up to date, skipped", name)
            return Step(out, key)
        return Step(out, key, build, inputs)

    def clean(self):
        shutil.rmtree(self.work_dir, ignore_errors=True)
