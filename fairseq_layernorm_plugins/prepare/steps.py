"""Resumable preparation: each step writes its own directory atomically with a stamp
(a hash of its inputs' keys and its options). Steps are built lazily: a step's key is
known from its inputs' keys before anything runs, so a recipe first compares the key of
its output with the output's stamp and, when they match, builds nothing, even after
its work directory was removed; otherwise :meth:`Step.ready` builds what the output
reads, skipping every step whose stamp still matches (an interrupted run resumes).
``force=True`` redoes them all. Preparations of one output directory run one at a time
(:func:`one_at_a_time`), also from separate processes, and only over an output directory
they may replace (:mod:`~fairseq_layernorm_plugins.prepare.output`)."""

import contextlib
import fcntl
import functools
import hashlib
import inspect
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path

from fairseq_layernorm_plugins.atomic import atomic_directory
from fairseq_layernorm_plugins.prepare import output
from fairseq_layernorm_plugins.prepare.textio import DataError

logger = logging.getLogger(__name__)
STAMP = ".stamp"
_TEMP = re.compile(r"\..+\.(tmp|old)-\w+")  # atomic_directory's temporary folders
_held = {}  # lock file -> how deep this process holds it


@contextlib.contextmanager
def exclusive(lock_file):
    """Hold an exclusive lock on ``lock_file`` (created if missing) against every other
    process; re-entrant within this process, so nested preparations share one lock. The
    file is removed when the outermost holder lets go (unlinked while still held); so a
    process that waited on it checks, once it holds the lock, that its file is still
    ``lock_file`` (else another process may hold a newer one) and takes the lock again if
    not. A file that is not a lock of ours (:func:`~.output.is_our_lock`) is refused."""
    lock_file = Path(os.path.abspath(lock_file))
    if lock_file in _held:
        _held[lock_file] += 1
        try:
            yield
        finally:
            _held[lock_file] -= 1
        return
    handle = _acquire(lock_file)
    _held[lock_file] = 1
    try:
        yield
    finally:
        del _held[lock_file]
        lock_file.unlink(missing_ok=True)  # before letting go: nobody else holds it now
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def _acquire(lock_file):
    """An open handle of ``lock_file`` holding its exclusive lock (see :func:`exclusive`)."""
    while True:
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            handle = open(lock_file, "a+")
        except FileNotFoundError:  # its folder, just made, was removed (a failed preparation beside it)
            continue
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                logger.info("%s: another process is preparing this data; waiting for it", lock_file)
                fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                current = os.stat(lock_file)
            except FileNotFoundError:
                current = None
            held = os.fstat(handle.fileno())
            if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
                if not output.is_our_lock(lock_file):
                    raise output.OutputError(f"{lock_file}: exists and is not this command's lock file; move it away")
                if held.st_size == 0:
                    handle.write(f"{output.LOCK_SIGNATURE} (pid {os.getpid()})\n")
                    handle.flush()
                return handle
        except BaseException:
            handle.close()
            raise
        handle.close()  # the file this process waited on was removed: lock the one there now


def one_at_a_time(prepare):
    """Decorate a ``prepare(..., out_dir, ...)``: ``out_dir`` is made absolute
    (:func:`~.output.normalise`) and checked (:func:`~.output.check_output`: an existing
    folder of other files is refused before anything is written); calls for the same
    ``out_dir`` (two training commands started together) run one after the other, holding
    OUT_DIR.lock, instead of racing over the shared OUT_DIR.work; the later one finds the
    data up to date. When it ends, OUT_DIR.lock is gone, and OUT_DIR.work too unless it
    holds finished steps (a failed run's, which a rerun resumes, or ``keep_work``'s); after
    a failure the folders it created for OUT_DIR are removed again if empty."""
    signature = inspect.signature(prepare)

    @functools.wraps(prepare)
    def locked(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        out_dir = bound.arguments["out_dir"] = output.normalise(bound.arguments["out_dir"])
        output.check_output(out_dir)
        created = output.missing_ancestor(out_dir.parent)
        try:
            with exclusive(output.lock_file(out_dir)):
                try:
                    return prepare(*bound.args, **bound.kwargs)
                finally:
                    output.remove_if_empty(output.work_dir(out_dir))
        finally:
            output.remove_created(out_dir.parent, created)

    return locked


def file_checksum(path, algorithm="sha256"):
    """The ``algorithm`` digest (a :mod:`hashlib` name) of a file's bytes."""
    if not Path(path).is_file():
        raise DataError(f"{path}: file not found")
    digest = hashlib.new(algorithm)
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
        """Remove what steps wrote in the work directory (stamped step folders, temporary
        folders left by an interrupted one), then the work directory if that emptied it."""
        if not self.work_dir.is_dir():
            return
        for entry in self.work_dir.iterdir():
            if entry.is_dir() and not entry.is_symlink() and ((entry / STAMP).is_file() or _TEMP.fullmatch(entry.name)):
                shutil.rmtree(entry, ignore_errors=True)
        if not output.remove_if_empty(self.work_dir):
            logger.warning("%s: kept, it holds files no step wrote", self.work_dir)
