"""Where a preparation writes, and what it may replace there: its output folder ``OUT``,
and beside it ``OUT.work/`` (the resumable steps) and ``OUT.lock`` (held while it runs,
removed when it ends). It never deletes or overwrites what it did not write: an ``OUT``
that exists must be a folder written by a preparation (it holds the ``stamp.json`` this
package writes) and hold nothing else; anything else is refused before anything is
written (:func:`check_output`), and checked again just before the old ``OUT`` is
replaced (:func:`output_directory`)."""

import contextlib
import json
import os
import re
from pathlib import Path

from fairseq_layernorm_plugins.atomic import atomic_directory
from fairseq_layernorm_plugins.prepare.textio import DataError

STAMP_FILE = "stamp.json"
LOCK_SIGNATURE = "fairseq-ln-prepare lock"
# what a stamp that lists no "files" (written before it did) has beside it: the layouts of
# dataset.py and wikitext.py
_LAYOUT = re.compile(r"(bin|code|spm\.model|stamp\.json|(train|valid|test)\.tokens)")
_SPLIT_FILE = re.compile(r"(train|valid|test\d*)(\.tok|\.raw)?\.(?P<lang>[^./]+)")


class OutputError(DataError):
    """``--out`` (or what lies beside it) holds something a preparation did not write."""


def normalise(out_dir):
    """``out_dir`` absolute (``.``, ``..`` resolved: the lock and work folders are named
    after it); a symbolic link to a folder is followed, so the data is written where it points."""
    out_dir = Path(os.path.abspath(out_dir))
    return Path(os.path.realpath(out_dir)) if out_dir.is_symlink() else out_dir


def work_dir(out_dir):
    return Path(out_dir).with_name(Path(out_dir).name + ".work")


def lock_file(out_dir):
    return Path(out_dir).with_name(Path(out_dir).name + ".lock")


def read_stamp(out_dir):
    """The content of ``out_dir/stamp.json`` if a preparation wrote it (a JSON object with a
    key), else None."""
    stamp = Path(out_dir) / STAMP_FILE
    try:
        content = json.loads(stamp.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) and isinstance(content.get("key"), str) else None


def _written(name, stamp):
    """Whether the entry ``name`` of a stamped output folder is one its preparation wrote."""
    if isinstance(stamp.get("files"), list):
        return name in stamp["files"]
    split_file = _SPLIT_FILE.fullmatch(name)
    langs = {stamp.get("src"), stamp.get("tgt")} - {None}
    return bool(_LAYOUT.fullmatch(name) or (split_file and split_file["lang"] in langs))


def foreign_entries(out_dir):
    """The entries of the folder ``out_dir`` a preparation did not write (folders with a
    trailing ``/``), sorted; all of them if it holds no stamp of ours."""
    stamp = read_stamp(out_dir) or {}
    return sorted(
        entry.name + ("/" if entry.is_dir() and not entry.is_symlink() else "")
        for entry in Path(out_dir).iterdir()
        if not (stamp and _written(entry.name, stamp))
    )


def _listed(names, at_most=6):
    return ", ".join(names[:at_most]) + (f" and {len(names) - at_most} more" if len(names) > at_most else "")


def check_output(out_dir):
    """Raise :class:`OutputError` (one line naming the path) unless a preparation may write
    ``out_dir``: it does not exist, is an empty folder, or is a folder a preparation wrote
    holding nothing else; ``OUT.work`` and ``OUT.lock`` beside it, if they exist, must be a
    folder and a lock file of ours."""
    out_dir = Path(out_dir)
    if out_dir.exists() or out_dir.is_symlink():
        if not out_dir.is_dir():
            raise OutputError(f"{out_dir}: exists and is not a folder; choose another --out")
        foreign = foreign_entries(out_dir)
        if foreign:
            raise OutputError(
                f"{out_dir}: exists and holds files this command did not write ({_listed(foreign)}); "
                "choose another --out or empty it"
            )
    work = work_dir(out_dir)
    if (work.exists() or work.is_symlink()) and not work.is_dir():
        raise OutputError(f"{work}: exists and is not a folder (this command keeps its steps there); move it away")
    lock = lock_file(out_dir)
    if lock.exists() or lock.is_symlink():
        if not is_our_lock(lock):
            raise OutputError(f"{lock}: exists and is not this command's lock file; move it away")


def is_our_lock(path):
    """Whether ``path`` is a lock file of a preparation: a plain file, empty (the first
    moment, or one written before locks were signed) or signed."""
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        return False
    with open(path, "rb") as f:
        head = f.read(len(LOCK_SIGNATURE))
    return head in (b"", LOCK_SIGNATURE.encode())


def write_stamp(folder, content):
    """Write ``content`` as ``folder/stamp.json``, with ``files``: every entry of ``folder``
    (what this preparation wrote, and may replace next time). Returns ``content``."""
    folder = Path(folder)
    content["files"] = sorted({entry.name for entry in folder.iterdir()} | {STAMP_FILE})
    (folder / STAMP_FILE).write_text(json.dumps(content, indent=1))
    return content


@contextlib.contextmanager
def output_directory(out_dir):
    """:func:`~fairseq_layernorm_plugins.atomic.atomic_directory` for an output folder: the
    old one is replaced only if it is still one a preparation may replace (checked again at
    that moment, in case files were put into it while this preparation ran)."""
    with atomic_directory(out_dir, check=check_output) as tmp:
        yield tmp


def remove_if_empty(folder):
    """Remove ``folder`` if it is an empty folder; True if it is gone."""
    try:
        Path(folder).rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def missing_ancestor(folder):
    """The outermost of ``folder`` and its parents that does not exist yet (None if ``folder`` exists)."""
    folder, top = Path(folder), None
    while not folder.exists() and folder != folder.parent:
        top, folder = folder, folder.parent
    return top


def remove_created(folder, top):
    """Remove ``folder`` and its parents up to ``top`` (those a preparation created), as long as they are empty."""
    if top is None:
        return
    folder = Path(folder)
    while remove_if_empty(folder) and folder != top and top in folder.parents:
        folder = folder.parent
