"""The package's console commands (``fairseq-ln-train`` ...) run in the test's own process, as
their console scripts run them: the entry point the installed script names, its ``sys.argv``
and environment as given, its exit status as the interpreter would make it (``sys.exit(N)``,
a message to stderr and 1 for ``sys.exit("...")`` or an uncaught exception), and everything
written to file descriptors 1 and 2 captured (print, C-level writes, and log records, which
go to stderr as in a fresh process: the root logger without handlers during the call)."""

import contextlib
import logging
import os
import sys
import tempfile
import traceback
from importlib.metadata import entry_points
from unittest import mock


def entry_point(command):
    """The function the installed console script ``command`` calls."""
    (ep,) = entry_points(group="console_scripts", name=command)
    return ep.load()


@contextlib.contextmanager
def _fresh_process_streams():
    """fds 1 and 2 (and ``sys.stdout``/``sys.stderr`` on them) into two temporary files, and
    logging as a new interpreter has it; yields a function returning (stdout, stderr)."""
    root = logging.getLogger()
    saved_logging = root.handlers[:], root.level
    saved_streams = sys.stdout, sys.stderr
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        for stream in saved_streams:
            stream.flush()
        saved_fds = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        root.handlers, root.level = [], logging.WARNING  # a record goes to logging.lastResort: stderr

        def read():
            sys.stdout.flush()
            sys.stderr.flush()
            return tuple(f.seek(0) or f.read().decode("utf-8", "replace") for f in (out, err))

        try:
            yield read
        finally:
            sys.stdout.close()
            sys.stderr.close()
            sys.stdout, sys.stderr = saved_streams
            for fd, saved in zip((1, 2), saved_fds):
                os.dup2(saved, fd)
                os.close(saved)
            root.handlers, root.level = saved_logging


def run_console_script(command, *args, env=None):
    """(exit status, stdout, stderr) of the console script ``command`` with ``args``, run in
    this process with ``env`` (default: this process's environment)."""
    main = entry_point(command)
    argv = [command, *map(str, args)]
    environ = dict(os.environ) if env is None else env
    with (
        mock.patch.dict(os.environ, environ, clear=True),
        mock.patch.object(sys, "argv", argv),
        _fresh_process_streams() as read,
    ):
        try:
            code = main()
        except SystemExit as exit:
            code = exit.code
        except BaseException:  # noqa: BLE001  (an uncaught exception: a traceback, status 1)
            traceback.print_exc()
            code = 1
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        out, err = read()
    return code or 0, out, err
