"""A run's resumable state, carried to another machine: what ``fairseq-train`` needs to go on
from where a run stopped, and what the run is scored by when it ends.

Where a machine's disk does not outlive a job (a cluster node's scratch space, a rented
machine), :func:`save` copies the state of runs still training into a folder on storage that
lasts, and :func:`restore` lays it out again as run directories that the claims, the grid and
``fairseq-train`` resume from. A run's state is its top-level files (``spec.json``,
``train.log``...) and three kinds of checkpoint:

* ``checkpoint_last.pt`` whole: model, optimizer state, lr scheduler, data iterator, the
  best validation loss and ``--patience`` counter; fairseq seeds each update from ``--seed``
  and the update number, so the resumed run trains exactly as an uninterrupted one;
* ``checkpoint_best.pt`` without its optimizer state (about a third of the size: scoring reads
  the model alone), or nothing when it is the same update as the last;
* with ``numbered=True`` the update checkpoints ``checkpoint_E_U.pt`` too, as the best one:
  the mean of a run's last N checkpoints needs those saved before the carry when the run
  ends within N checkpoints of it. Without them that mean is of the checkpoints saved after
  the carry only, and its record lists which (``claim.averaged_score``).

A checkpoint is read back and checked after it is copied (fairseq copies a new checkpoint
to its other names non-atomically, so a run that trains on while it is saved may show one
half-written), and every folder is written beside its destination and renamed into place.
"""

import json
import shutil
import time
from pathlib import Path

import torch

from fairseq_layernorm_plugins.atomic import atomic_directory, atomic_path, write_json
from fairseq_layernorm_plugins.recipes.checkpoints import numbered_checkpoints

STATE = "state.json"  # in a saved run: its updates, its checkpoints, when it was saved
LAST, BEST = "checkpoint_last.pt", "checkpoint_best.pt"


def checkpoint_update(state):
    """The number of updates a loaded fairseq checkpoint was saved at."""
    return int(state["optimizer_history"][-1]["num_updates"])


def _load(path, copy_to=None, attempts=5, wait=2.0):
    """The checkpoint ``path`` loaded on the CPU (copied to ``copy_to`` first, and that copy
    read), retried while fairseq may still be writing it."""
    for attempt in range(attempts):
        try:
            if copy_to is not None:
                shutil.copy2(path, copy_to)
            return torch.load(copy_to or path, map_location="cpu", weights_only=False)
        except (RuntimeError, EOFError, OSError):
            if attempt == attempts - 1:
                raise ValueError(f"{path}: not a readable checkpoint") from None
            time.sleep(wait)


def _model_only(state, path):
    """Write ``state`` without its optimizer state to ``path`` (atomically)."""
    with atomic_path(path) as tmp:
        torch.save({k: v for k, v in state.items() if k != "last_optimizer_state"}, tmp)


def save_run(run_dir, out, numbered=False):
    """Copy the state of the run in ``run_dir`` into the new folder ``out`` (see the module
    docstring); returns its ``state.json`` record: {"update", "best_update", "numbered":
    {update: file}, "saved"}. An error naming the folder when it has no ``checkpoint_last.pt``."""
    run_dir, out = Path(run_dir), Path(out)
    checkpoints = run_dir / "checkpoints"
    if not (checkpoints / LAST).is_file():
        raise ValueError(f"{run_dir}: no checkpoints/{LAST} to carry")
    with atomic_directory(out) as tmp:
        for path in sorted(run_dir.iterdir()):
            if path.is_file() and not path.name.startswith("."):
                shutil.copy2(path, tmp / path.name)
        while True:  # a best checkpoint saved after the last one was copied: copy both again
            update = checkpoint_update(_load(checkpoints / LAST, copy_to=tmp / LAST))
            best = _load(checkpoints / BEST) if (checkpoints / BEST).is_file() else None
            if best is None or checkpoint_update(best) <= update:
                break
        record = {"update": update, "best_update": None, "numbered": {}}
        if best is not None:
            record["best_update"] = checkpoint_update(best)
            if record["best_update"] != update:
                _model_only(best, tmp / BEST)
        if numbered:
            for number, path in sorted(numbered_checkpoints(checkpoints, "update").items()):
                if number < update:  # the one at ``update`` is the last checkpoint's model
                    _model_only(_load(path), tmp / path.name)
                record["numbered"][str(number)] = path.name
        record["saved"] = time.strftime("%Y-%m-%d %H:%M:%S")
        write_json(tmp / STATE, record)
    return record


def restore_run(saved, run_dir):
    """Lay the run saved in ``saved`` out as ``run_dir``, ready for fairseq to resume; returns
    the saved record. A ``run_dir`` that has trained as far or further is left alone and None
    is returned, so restoring on the machine that kept its runs changes nothing; any other
    ``run_dir`` is replaced (no run may be training in it)."""
    saved, run_dir = Path(saved), Path(run_dir)
    record = json.loads((saved / STATE).read_text())
    last = run_dir / "checkpoints" / LAST
    if last.is_file() and checkpoint_update(_load(last)) >= record["update"]:
        return None
    with atomic_directory(run_dir) as tmp:
        (tmp / "checkpoints").mkdir()
        for path in saved.iterdir():
            if path.name != STATE and path.suffix != ".pt":
                shutil.copy2(path, tmp / path.name)
        shutil.copy2(saved / LAST, tmp / "checkpoints" / LAST)
        if record["best_update"] is not None:
            best_from = saved / BEST if (saved / BEST).is_file() else saved / LAST
            shutil.copy2(best_from, tmp / "checkpoints" / BEST)
        for number, name in record["numbered"].items():
            from_file = saved / name if int(number) < record["update"] else saved / LAST
            shutil.copy2(from_file, tmp / "checkpoints" / name)
    return record


def saved_runs(state_dir):
    """The runs saved under ``state_dir``: their folders relative to it, sorted."""
    state_dir = Path(state_dir)
    return sorted(path.parent.relative_to(state_dir) for path in state_dir.rglob(STATE))


def save(run_dirs, root, state_dir, numbered=False, echo=print):
    """:func:`save_run` each of ``run_dirs`` (folders under ``root``) into ``state_dir`` at the
    same relative path; runs saved there before are replaced. Returns {relative path: record}."""
    root, saved = Path(root).resolve(), {}
    for run_dir in run_dirs:
        if not Path(run_dir).resolve().is_relative_to(root):
            raise ValueError(f"{run_dir}: not a run under {root}")
        relative = Path(run_dir).resolve().relative_to(root)
        saved[str(relative)] = record = save_run(run_dir, Path(state_dir) / relative, numbered)
        echo(f"saved {relative}: update {record['update']} (best {record['best_update']})")
    return saved


def restore(state_dir, root, echo=print):
    """:func:`restore_run` every run saved under ``state_dir`` into ``root`` at the same relative
    path. Returns {relative path: record, or None where the run under ``root`` was kept}."""
    restored = {}
    for relative in saved_runs(state_dir):
        restored[str(relative)] = record = restore_run(Path(state_dir) / relative, Path(root) / relative)
        echo(f"{relative}: " + (f"restored at update {record['update']}" if record else "kept (trained as far)"))
    return restored
