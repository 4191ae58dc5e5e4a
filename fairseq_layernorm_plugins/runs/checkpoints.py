"""A run's checkpoints: the numbered ones fairseq keeps, the last N of them, a window of them,
and their average (as fairseq's ``scripts/average_checkpoints.py``)."""

import re
from pathlib import Path

import torch

from fairseq_layernorm_plugins._compat import load_checkpoint
from fairseq_layernorm_plugins.atomic import atomic_path

_EPOCH = re.compile(r"checkpoint(\d+)\.pt$")
_UPDATE = re.compile(r"checkpoint_(\d+)_(\d+)\.pt$")


def numbered_checkpoints(save_dir, kind="epoch"):
    """{epoch (or update): path} of the epoch (``checkpointE.pt``) or update
    (``checkpoint_E_U.pt``) checkpoints in ``save_dir``."""
    pattern = _EPOCH if kind == "epoch" else _UPDATE
    return {int(m.groups()[-1]): p for p in Path(save_dir).glob("checkpoint*.pt") if (m := pattern.search(p.name))}


def checkpoint_update(path):
    """The update of an update checkpoint (``checkpoint_E_U.pt``), None for any other."""
    match = _UPDATE.search(Path(path).name)
    return int(match.group(2)) if match else None


def last_checkpoints(save_dir, n, kind="epoch", upper_bound=None):
    """The last ``n`` epoch or update checkpoints, newest first; ``checkpoint_last.pt`` when
    there are none. With ``upper_bound`` the last ``n`` numbered at most ``upper_bound``, and
    fewer than ``n`` of them is an error (as fairseq's ``average_checkpoints.py``)."""
    found = sorted(numbered_checkpoints(save_dir, kind).items(), reverse=True)
    if upper_bound is not None:
        found = [(number, path) for number, path in found if number <= upper_bound][:n]
        if len(found) < n:
            raise ValueError(f"{save_dir}: {len(found)} {kind} checkpoints up to {upper_bound}, not the {n} to average")
    found = [p for _, p in found[:n]]
    return found or [Path(save_dir) / "checkpoint_last.pt"]


def existing(paths):
    """``paths`` when every one is a file; else a ValueError naming the first missing."""
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"{path}: no such checkpoint (has the run saved one yet?)")
    return paths


def window_checkpoints(save_dir, size, last):
    """The epoch checkpoints ``last - size + 1 .. last``, newest first (an error if one is missing)."""
    epochs = numbered_checkpoints(save_dir)
    missing = [e for e in range(last - size + 1, last + 1) if e not in epochs]
    if missing:
        raise ValueError(f"{save_dir}: no checkpoint{missing[0]}.pt for the window of {size} ending at epoch {last}")
    return [epochs[e] for e in range(last, last - size, -1)]


def average_checkpoints(paths, output):
    """Write a checkpoint whose model parameters are the element-wise mean of ``paths``'
    (accumulated in float64; integer buffers from the first); the rest of the first
    checkpoint is kept. Written to a temp file, then renamed."""
    paths = [Path(p) for p in paths]
    first = load_checkpoint(paths[0])
    sums = {k: v.double() if v.is_floating_point() else v for k, v in first["model"].items()}
    for path in paths[1:]:
        model = load_checkpoint(path)["model"]
        if model.keys() != sums.keys():
            raise ValueError(f"{path}: parameters differ from {paths[0]}'s")
        for k, v in model.items():
            if v.is_floating_point():
                sums[k] += v.double()
    first["model"] = {
        k: (v / len(paths)).to(first["model"][k].dtype) if v.is_floating_point() else v for k, v in sums.items()
    }
    with atomic_path(output) as tmp:
        torch.save(first, tmp)
    return Path(output)


BEST_PROTOCOL = "checkpoint_best.pt: the lowest validation loss"


def best_checkpoint(save_dir):
    """``checkpoint_best.pt`` of ``save_dir`` (fairseq's lowest validation loss); an error naming
    the folder when there is none."""
    checkpoint = Path(save_dir) / "checkpoint_best.pt"
    if not checkpoint.is_file():
        raise ValueError(f"{save_dir}: no checkpoint_best.pt (the recipe scores the best checkpoint)")
    return checkpoint


def chosen_checkpoint(run_dir, save_dir, generate, average_last=None):
    """(the checkpoint to score, the checkpoints it comes from, the protocol in words) of a run
    whose recipe's ``generate`` says ``checkpoint: best`` (the lowest validation loss) or
    ``average_last: N`` (``average_last`` overrides it; the mean written to ``run_dir``)."""
    if generate.get("checkpoint") == "best" and average_last is None:
        checkpoint = best_checkpoint(save_dir)
        return checkpoint, [checkpoint], BEST_PROTOCOL
    n = average_last or generate.get("average_last", 1)
    checkpoints = existing(last_checkpoints(save_dir, n))
    protocol = f"average of the last {len(checkpoints)} epoch checkpoints"
    if len(checkpoints) == 1:
        return checkpoints[0], checkpoints, protocol
    return average_checkpoints(checkpoints, Path(run_dir) / f"checkpoint_avg{len(checkpoints)}.pt"), checkpoints, protocol
