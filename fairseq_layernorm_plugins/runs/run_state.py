"""A run's resumable state, carried to another machine: what ``fairseq-train`` needs to go on
from where a run stopped, and what the run is scored by when it ends.

Where a machine's disk does not outlive a job (a cluster node's scratch space, a rented
machine), :func:`save` copies the state of runs still training into a folder on storage that
lasts, and :func:`restore` lays it out again as run directories that the claims, the grid and
``fairseq-train`` resume from. A run's state is its top-level files (``spec.json``,
``train.log``...) and three kinds of checkpoint:

* ``checkpoint_last.pt`` whole: model, optimizer state, lr scheduler, data iterator, the
  best validation loss and ``--patience`` counter; fairseq seeds each update from ``--seed``
  and the update number, so the resumed run trains as an uninterrupted one;
* ``checkpoint_best.pt`` without its optimizer state (about a third of the size: scoring reads
  the model alone), or nothing when it is the same update as the last;
* with ``numbered=True`` the update checkpoints ``checkpoint_E_U.pt`` up to the last one, as
  the best one: the mean of a run's last N checkpoints needs those saved before the carry
  when the run ends within N checkpoints of it. Without them that mean is of the checkpoints
  saved after the carry only, and its record lists which (``claim.averaged_score``).

A run may go on training while it is saved. fairseq writes a new checkpoint under one name
and then copies it to its others (best, last) in place, so each checkpoint is copied again
until its file did not change during the copy and the copy loads; the top-level files are
copied last (a log that runs ahead of its checkpoint is cut back on resume:
``curves.read_log_curves``). Every folder is written beside its destination and renamed into
place.
"""

import json
import pickle
import shutil
import time
from pathlib import Path

import torch

from fairseq_layernorm_plugins._compat import load_checkpoint
from fairseq_layernorm_plugins.atomic import atomic_directory, atomic_path, write_json
from fairseq_layernorm_plugins.runs.checkpoints import numbered_checkpoints

STATE = "state.json"  # in a saved run: where it lives, its updates, its checkpoints, when saved
LAST, BEST = "checkpoint_last.pt", "checkpoint_best.pt"
ATTEMPTS, WAIT = 5, 2.0  # copies of a checkpoint that is being written, seconds between them
UNREADABLE = (RuntimeError, EOFError, pickle.UnpicklingError)  # torch.load of a half-written file


def updates_of(state):
    """The number of updates a loaded fairseq checkpoint was saved at (``checkpoints.checkpoint_update``
    reads it from a file name instead)."""
    return int(state["optimizer_history"][-1]["num_updates"])


def _stamp(path):
    stat = Path(path).stat()
    return stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns


def _copy_checkpoint(source, copy):
    """Copy the checkpoint ``source`` to ``copy`` and return it loaded: copied again while
    ``source`` changes during the copy or the copy does not load. FileNotFoundError when
    ``source`` is gone (fairseq removes old update checkpoints)."""
    for attempt in range(ATTEMPTS):
        before = _stamp(source)
        try:
            shutil.copy2(source, copy)
        except FileNotFoundError:
            raise
        except OSError as err:
            raise ValueError(f"{copy}: cannot write ({err.strerror})") from None
        try:
            state = load_checkpoint(copy)
            if _stamp(source) == before:
                return state
        except UNREADABLE:
            pass
        if attempt < ATTEMPTS - 1:
            time.sleep(WAIT)
    raise ValueError(f"{source}: not a readable checkpoint (changing or cut short)")


def _model_only(state, path):
    """Write ``state`` without its optimizer state to ``path`` (atomically)."""
    with atomic_path(path) as tmp:
        torch.save({k: v for k, v in state.items() if k != "last_optimizer_state"}, tmp)


def save_run(run_dir, out, path, numbered=False):
    """Copy the state of the run in ``run_dir`` into the new folder ``out`` (see the module
    docstring), recording ``path``, the run's folder relative to where runs live; returns its
    ``state.json`` record: {"path", "update", "best_update", "numbered": {update: file},
    "saved"}. An error naming the folder when it has no ``checkpoint_last.pt``."""
    run_dir, out = Path(run_dir), Path(out)
    checkpoints = run_dir / "checkpoints"
    if not (checkpoints / LAST).is_file():
        raise ValueError(f"{run_dir}: no checkpoints/{LAST} to carry")
    with atomic_directory(out) as tmp:
        # a best checkpoint newer than the copied last: fairseq was between its two copies
        for _ in range(ATTEMPTS):
            update = updates_of(_copy_checkpoint(checkpoints / LAST, tmp / LAST))
            best = _copy_checkpoint(checkpoints / BEST, tmp / BEST) if (checkpoints / BEST).is_file() else None
            if best is None or updates_of(best) <= update:
                break
            time.sleep(WAIT)
        # else a run killed between the two copies: its best is carried as it is, newer than
        # its last, and the resumed run saves it again at that update
        record = {"path": str(path), "update": update, "best_update": None, "numbered": {}}
        (tmp / BEST).unlink(missing_ok=True)
        if best is not None:
            record["best_update"] = updates_of(best)
            if record["best_update"] != update:
                _model_only(best, tmp / BEST)
        for number, checkpoint in sorted(numbered_checkpoints(checkpoints, "update").items()):
            if numbered and number < update:
                try:
                    _model_only(_copy_checkpoint(checkpoint, tmp / checkpoint.name), tmp / checkpoint.name)
                except FileNotFoundError:  # removed by fairseq (--keep-interval-updates) meanwhile
                    continue
            if number <= update and (numbered or number == update):
                record["numbered"][str(number)] = checkpoint.name  # the one at ``update`` is the last's model
        for file in sorted(run_dir.iterdir()):
            if file.is_file() and not file.name.startswith("."):
                shutil.copy2(file, tmp / file.name)
        record["saved"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        write_json(tmp / STATE, record)
    return record


def _saved_record(saved):
    """The ``state.json`` record of the run saved in ``saved``; an error naming what is wrong."""
    try:
        record = json.loads((Path(saved) / STATE).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{Path(saved) / STATE}: not a saved run's record ({err})") from None
    if not (Path(saved) / LAST).is_file():
        raise ValueError(f"{saved}: no {LAST} (an incomplete saved run)")
    if Path(record.get("path", ".")) == Path("."):
        raise ValueError(f"{Path(saved) / STATE}: no path to restore the run to")
    return record


def restore_run(saved, root):
    """Lay the run saved in ``saved`` out under ``root`` at the path it was saved from, ready
    for fairseq to resume; returns the saved record. A run there that has trained as far or
    further is left alone and None is returned, so restoring on the machine that kept its runs
    changes nothing; a run there that trained less is replaced (none may be training in it)."""
    saved = Path(saved)
    record = _saved_record(saved)
    run_dir = Path(root) / record["path"]
    last = run_dir / "checkpoints" / LAST
    if last.is_file() and updates_of(load_checkpoint(last)) >= record["update"]:
        return None
    with atomic_directory(run_dir) as tmp:
        (tmp / "checkpoints").mkdir()
        for file in saved.iterdir():
            if file.name != STATE and file.suffix != ".pt":
                shutil.copy2(file, tmp / file.name)
        shutil.copy2(saved / LAST, tmp / "checkpoints" / LAST)
        if record["best_update"] is not None:
            best_from = saved / BEST if (saved / BEST).is_file() else saved / LAST
            shutil.copy2(best_from, tmp / "checkpoints" / BEST)
        for number, name in record["numbered"].items():
            from_file = saved / name if int(number) < record["update"] else saved / LAST
            shutil.copy2(from_file, tmp / "checkpoints" / name)
    return record


def saved_runs(state_dir):
    """The folders of the runs saved under ``state_dir`` (or ``state_dir`` itself, one run's),
    sorted; hidden folders (one being written) are not runs."""
    state_dir = Path(state_dir)
    found = [path.parent for path in state_dir.rglob(STATE)]
    return sorted(p for p in found if not any(part.startswith(".") for part in p.relative_to(state_dir).parts))


def save(run_dirs, root, state_dir, numbered=False, echo=print):
    """:func:`save_run` each of ``run_dirs`` (folders under ``root``) into ``state_dir`` at the
    same relative path; runs saved there before are replaced. A folder that cannot be saved
    is reported and the others are saved; then a ValueError names each that was not.
    Returns {relative path: record}."""
    root, saved, failed = Path(root).resolve(), {}, []
    for run_dir in run_dirs:
        resolved = Path(run_dir).resolve()
        try:
            if resolved == root or not resolved.is_relative_to(root):
                raise ValueError(f"{run_dir}: not a run under {root}")
            relative = resolved.relative_to(root)
            saved[str(relative)] = record = save_run(run_dir, Path(state_dir) / relative, relative, numbered)
        except ValueError as err:
            failed.append(str(err))
            echo(failed[-1])
            continue
        echo(f"saved {relative}: update {record['update']} (best {record['best_update']})")
    if failed:
        raise ValueError(f"{len(failed)} of {len(run_dirs)} not saved; {failed[0]}")
    return saved


def restore(state_dir, root, echo=print):
    """:func:`restore_run` every run saved under ``state_dir`` into ``root``. Returns {relative
    path: record, or None where the run under ``root`` was kept}; a ValueError naming
    ``state_dir`` when it holds no saved run."""
    runs = saved_runs(state_dir)
    if not runs:
        raise ValueError(f"{state_dir}: no saved run (no {STATE} under it)")
    restored = {}
    for saved in runs:
        record = restore_run(saved, root)
        path = record["path"] if record else _saved_record(saved)["path"]
        restored[path] = record
        echo(f"{path}: " + (f"restored at update {record['update']}" if record else "kept (trained as far)"))
    return restored
