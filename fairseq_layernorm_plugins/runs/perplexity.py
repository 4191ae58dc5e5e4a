"""Evaluate a language-model run: its checkpoint chosen by the recipe's protocol (``generate:``
``checkpoint: best``, the lowest validation loss, or ``average_last: N``), then fairseq-eval-lm
on the validation and test sets with the recipe's ``generate.eval_lm`` settings (block length
``tokens_per_sample``, ``context_window`` tokens of each block already seen, ``batch_size``
blocks at once). Perplexity is per token of the data, 2 ** (mean NLL in bits), as fairseq
prints it: word-level on WikiText. Results are written as results.json beside the run, as
``evaluate.py`` writes a translation run's.
"""

import re
from pathlib import Path

import torch

from fairseq_layernorm_plugins.atomic import write_json
from fairseq_layernorm_plugins.runs.checkpoints import chosen_checkpoint
from fairseq_layernorm_plugins.runs.launch import BIN, PLUGIN_DIR, run_logged, run_save_dir

SUBSETS = ("valid", "test")
EVAL_LM = {"batch_size": 2, "tokens_per_sample": 512, "context_window": 400}  # fairseq's language-model README
_EVALUATED = re.compile(r"Evaluated ([\d,]+) tokens")
_LOSS = re.compile(r"Loss \(base 2\): ([\d.]+|nan|inf), Perplexity: ([\d.]+|nan|inf)")


def read_eval_lm(log):
    """(tokens, loss in bits, perplexity) from fairseq-eval-lm's log ``log``."""
    text = Path(log).read_text(encoding="utf-8", errors="replace")
    tokens, loss = _EVALUATED.findall(text), _LOSS.findall(text)
    if not tokens or not loss:
        raise ValueError(f"{log}: no 'Evaluated ... tokens' / 'Loss (base 2)' line from fairseq-eval-lm")
    return int(tokens[-1].replace(",", "")), float(loss[-1][0]), float(loss[-1][1])


def score_perplexity(run, run_dir, checkpoint, subset, cpu=None):
    """fairseq-eval-lm of ``checkpoint`` on ``subset`` of the run's data (its log beside the run):
    {"score": perplexity, "loss_bits", "tokens", "label"}."""
    settings = {**EVAL_LM, **run.get("generate", {}).get("eval_lm", {})}
    cpu = (not torch.cuda.is_available()) if cpu is None else cpu
    cmd = [BIN / "fairseq-eval-lm", run["data"], "--user-dir", PLUGIN_DIR, "--path", checkpoint]
    cmd += ["--gen-subset", subset, *(["--cpu"] if cpu else [])]
    for key, value in settings.items():
        cmd += ["--" + key.replace("_", "-"), value]
    log = Path(run_dir) / f"eval-lm-{subset}.log"
    log.unlink(missing_ok=True)
    run_logged(cmd, log, f"{run['recipe']} eval-lm {subset}", echo=lambda line: "Perplexity" in line)
    tokens, loss, perplexity = read_eval_lm(log)
    return {"score": perplexity, "loss_bits": loss, "tokens": tokens, "label": "perplexity (per token)"}


def evaluate_lm(run_dir, run, average_last=None, cpu=None, echo=print):
    """Evaluate the language-model run in ``run_dir`` (its run.json: ``run``) by its recipe's
    protocol; returns and writes results.json."""
    run_dir = Path(run_dir)
    save_dir = run_save_dir(run_dir, run)
    gen = run.get("generate", {})
    checkpoint, checkpoints, protocol = chosen_checkpoint(run_dir, save_dir, gen, average_last)
    scores = {subset: score_perplexity(run, run_dir, checkpoint, subset, cpu) for subset in SUBSETS}
    result = {
        "recipe": run["recipe"],
        "depth": run.get("depth"),
        "run_dir": str(run_dir),
        "task": "language_modeling",
        "checkpoints": [str(p) for p in checkpoints],
        "protocol": protocol,
        "eval_lm": {**EVAL_LM, **gen.get("eval_lm", {})},
        "perplexity": scores,
        "headline": "test",
        "paper": run.get("paper"),
    }
    write_json(run_dir / "results.json", result)
    for subset, value in scores.items():
        echo(
            f"{run['recipe']} {run.get('depth')}: {subset} perplexity {value['score']:.2f} ({value['tokens']:,} tokens)"
        )
    return result
