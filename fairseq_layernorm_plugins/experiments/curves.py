"""Reading fairseq's ``--log-format json`` training logs: the training and validation curves
of a run, why it stopped, and the unigram entropy a validation loss is judged against.

Used by the results tables (``report.py``), the experiment harness (``experiment.py``) and
the scripts that read a log as fairseq writes it (``scripts/depth_stability.py``).
"""

import json
import math
import re
import statistics
from collections import Counter
from pathlib import Path

# fairseq.trainer's line when a run starts from a checkpoint (fairseq 0.12)
OVERFLOW = "gradient overflow detected"  # fairseq's Trainer, once per skipped fp16 update
LOADED_CHECKPOINT = re.compile(r"Loaded checkpoint .* \(epoch \d+ @ (\d+) updates\)")
# the lines of a log that say why fairseq stopped: a NaN/inf loss, the fp16 loss scale, CUDA
STOPPED = re.compile(r"(FloatingPointError|Minimum loss scale|OverflowError|CUDA out of memory|Error:)")


_VALID_SUBSET = re.compile(r"'valid_subset': '([^']+)'")  # fairseq-train's first line prints its config
_RECORD = re.compile(r"\| ([\w.-]+) \| (\{.*)$")


def log_record(line, valid_subset="valid"):
    """(kind, record) of one line of a fairseq ``--log-format json`` log, kind ``train_inner``,
    ``train`` (end of epoch) or ``valid``, the validation on ``valid_subset`` (fairseq tags a
    validation with its subset's name: a speech run validates on ``dev-clean``), its keys
    ``valid_*`` whatever the subset; None for any other line."""
    match = _RECORD.search(line)
    if match is None or match[1] not in ("train_inner", "train", valid_subset):
        return None
    record = json.loads(match[2])
    if match[1] != valid_subset or valid_subset == "valid":
        return match[1], record
    return "valid", {key.replace(f"{valid_subset}_", "valid_", 1): value for key, value in record.items()}


def read_log_curves(log_path):
    """{"train": [{"epoch", "update", "loss", "wall", "wps", "loss_scale"}], "valid": [{"epoch", "update", "loss", "nll_loss", "bleu"}],
    "end": {"update", "wall"}} from a fairseq json log; "epoch" is fractional (fairseq's progress
    within the epoch), so validations every N updates fall where they happened; "end" is the
    last update and wall-clock second logged (``train_inner`` or end-of-epoch ``train``); "wps" (target
    words per second) and "loss_scale" (``--fp16`` only) are None where fairseq logged none.
    "overflows" (``--fp16``): for each update skipped for inf/NaN gradients, the last update
    logged before it (with a log interval that divides the checkpoint interval, it fell after
    that one and not after the next checkpoint).
    A log that a resumed run appended to holds what followed its checkpoint twice: fairseq's
    "Loaded checkpoint ... (epoch E @ U updates)" line drops what was logged after update U,
    so the resumed run's telling stands."""
    curves = {"train": [], "valid": [], "end": {"update": 0, "wall": 0.0}, "overflows": []}
    epoch_at = {}
    text = Path(log_path).read_text(errors="replace")
    subsets = _VALID_SUBSET.search(text)  # the first of --valid-subset, as fairseq's best checkpoint
    valid_subset = subsets[1].split(",")[0] if subsets else "valid"
    for line in text.splitlines():
        if loaded := LOADED_CHECKPOINT.search(line):
            for name in ("train", "valid"):
                curves[name] = [r for r in curves[name] if r["update"] <= int(loaded[1])]
            curves["overflows"] = [u for u in curves["overflows"] if u < int(loaded[1])]
            curves["end"]["update"] = min(curves["end"]["update"], int(loaded[1]))
            continue
        if OVERFLOW in line:
            curves["overflows"].append(curves["end"]["update"])
            continue
        if (parsed := log_record(line, valid_subset)) is None:
            continue
        kind, record = parsed
        if kind in ("train_inner", "train"):
            inner = kind == "train_inner"
            prefix = "" if inner else "train_"
            update, wall = int(record[f"{prefix}num_updates"]), float(record[f"{prefix}wall"])
            curves["end"] = {"update": max(update, curves["end"]["update"]), "wall": max(wall, curves["end"]["wall"])}
            if inner:
                epoch_at[update] = float(record["update"])  # fairseq logs epoch - 1 + progress here
                curves["train"].append(
                    {
                        "epoch": epoch_at[update],
                        "update": update,
                        "loss": float(record["loss"]),
                        "wall": wall,
                        "wps": _optional(record.get("wps")),
                        "loss_scale": _optional(record.get("loss_scale")),
                    }
                )
        else:
            update = int(record.get("valid_num_updates", 0))
            bleu = record.get("valid_bleu")
            curves["valid"].append(
                {
                    "epoch": _epoch_at(epoch_at, update, float(record["epoch"])),
                    "update": update,
                    "loss": float(record["valid_loss"]),
                    # a criterion without label smoothing (a language model's) logs its NLL as the loss
                    "nll_loss": float(record.get("valid_nll_loss", record["valid_loss"])),
                    "bleu": None if bleu is None else float(bleu),
                }
            )
    return curves


def _optional(value):
    return None if value is None else float(value)


def _epoch_at(epoch_at, update, fallback):
    """The fractional epoch of ``update``: logged, or extrapolated from the last logged
    update before it within the same epoch (a validation at the end of training falls
    between two ``train_inner`` lines); ``fallback`` when nothing was logged before it."""
    if update in epoch_at:
        return epoch_at[update]
    before = [u for u in epoch_at if u < update and int(epoch_at[u]) == int(fallback) - 1]
    if not before:
        return fallback
    last = max(before)
    first = min(before)  # two points of this epoch give its epochs per update
    per_update = (epoch_at[last] - epoch_at[first]) / (last - first) if last > first else 0.0
    return min(epoch_at[last] + (update - last) * per_update, fallback)


def training_summary(curves):
    """Loss trajectory, fp16 loss-scale history and speed of one run's log curves
    (:func:`read_log_curves`): "first_loss" / "last_loss" are means over the first and last
    quarter of the logged intervals, "falling" compares them, "wps" is the median words per
    second without the first interval (it includes start-up)."""
    losses = [p["loss"] for p in curves["train"]]
    scales = [p["loss_scale"] for p in curves["train"] if p.get("loss_scale") is not None]
    wps = [p["wps"] for p in curves["train"][1:] if p.get("wps")]
    quarter = max(1, len(losses) // 4)
    valid = curves["valid"][-1] if curves["valid"] else {}
    return {
        "updates": curves.get("end", {}).get("update", 0),
        "train_loss": losses,
        "train_updates": [p["update"] for p in curves["train"]],
        "first_loss": statistics.mean(losses[:quarter]) if losses else None,
        "last_loss": statistics.mean(losses[-quarter:]) if losses else None,
        "finite": bool(losses) and all(math.isfinite(x) for x in losses) and math.isfinite(valid.get("loss", math.nan)),
        "falling": len(losses) >= 2 and statistics.mean(losses[-quarter:]) < statistics.mean(losses[:quarter]),
        "valid_loss": valid.get("loss"),
        "loss_scale": scales,
        "loss_scale_min": min(scales) if scales else None,
        "loss_scale_last": scales[-1] if scales else None,
        "wps": statistics.median(wps) if wps else None,
    }


def first_error(log_path):
    """The first line of a log that says why fairseq stopped (:data:`STOPPED`), at most 300
    characters; None when there is none."""
    for line in Path(log_path).read_text(errors="replace").splitlines():
        if STOPPED.search(line):
            return line.strip()[:300]
    return None


def unigram_bits(data, target="en"):
    """Entropy (bits per token, end of sentence included) of the training targets' unigram
    distribution: the validation loss of a model that learned only word frequencies."""
    counts = Counter()
    lines = Path(data, f"train.{target}").read_text(encoding="utf-8").splitlines()
    for line in lines:
        counts.update(line.split())
    counts["</s>"] = len(lines)
    total = sum(counts.values())
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def status(final_nll, unigram):
    """A run's status from its final validation NLL (bits per token): "diverged" when not finite
    (fairseq stopped on a NaN/inf loss), "stalled" when not below ``unigram`` (the unigram
    entropy of the training targets, :func:`unigram_bits`: the model learned word
    frequencies at most), otherwise "trained"."""
    return "diverged" if not math.isfinite(final_nll) else "stalled" if final_nll >= unigram else "trained"
