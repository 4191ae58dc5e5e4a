"""End to end through the real command-line tools on tiny data: ``fairseq-train
--user-dir`` for each architecture, resume from ``checkpoint_last.pt``, and
``fairseq-generate --user-dir``. New methods are covered by registering them."""

import math
import re

import pytest
from conftest import PLUGIN_DIR, TINY_MODEL, json_records, plugin_archs, run_cli

from fairseq_layernorm_plugins.optim.lr_scheduler.epoch_decay_nowarmup import epoch_decay_lr
from fairseq_layernorm_plugins.optim.lr_scheduler.inverse_sqrt_nowarmup import inverse_sqrt_nowarmup_lr

ARCHS = plugin_archs()
# one architecture per registered plugin model (its IWSLT size), plus fairseq's Post-LN
MODEL_ARCHS = sorted({m + "_iwslt_de_en" if m + "_iwslt_de_en" in ARCHS else m for m in set(ARCHS.values())}) + [
    "transformer_iwslt_de_en"
]

ADAM = ["--optimizer", "adam", "--adam-betas", "(0.9, 0.98)"]
RADAM = ["--optimizer", "radam", "--adam-betas", "(0.9, 0.98)"]
WARMUP = ["--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10", "--warmup-init-lr", "1e-7"]
NOWARMUP = ["--lr-scheduler", "inverse_sqrt_nowarmup", "--decay-period", "40"]
EPOCH_DECAY = [
    "--lr-scheduler",
    "epoch_decay_nowarmup",
    "--decay-epoch",
    "3",
    "--decay-factor",
    "0.3",
    "--inverse-sqrt-after-decay",
]

# (arch, optimizer flags, schedule flags): every model with its recipe's kind of schedule
# (warm-up unless the method is meant to train without), and each new optimizer /
# schedule once
NO_WARMUP_METHODS = {"transformer_tfixup_iwslt_de_en"}
RUNS = [(arch, ADAM, NOWARMUP if arch in NO_WARMUP_METHODS else WARMUP) for arch in MODEL_ARCHS] + [
    ("transformer_preln_iwslt_de_en", RADAM, NOWARMUP),
    ("transformer_preln_iwslt_de_en", ADAM, EPOCH_DECAY),
]


def train(data_bin, save_dir, arch, optimizer, schedule, max_update):
    # exactly the README's form: run from the repository root with a relative --user-dir
    return run_cli(
        "fairseq-train",
        data_bin,
        "--user-dir",
        PLUGIN_DIR.name,
        "--arch",
        arch,
        *TINY_MODEL,
        *optimizer,
        *schedule,
        "--lr",
        "3e-3",
        "--weight-decay",
        "1e-4",
        "--clip-norm",
        "0",
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--max-tokens",
        "1000",
        "--max-update",
        max_update,
        "--seed",
        "1",
        "--cpu",
        "--save-dir",
        save_dir,
        "--no-epoch-checkpoints",
        "--log-format",
        "json",
        "--log-interval",
        "1",
        "--no-progress-bar",
        cwd=PLUGIN_DIR.parent,
    )


def check_lrs(records, schedule):
    """The lr fairseq logged at every update equals the schedule's formula."""
    if schedule is EPOCH_DECAY:
        assert {1, 2, 3} <= {int(r["epoch"]) for r in records}, "the run must cross the decay epoch"
    for r in records:
        t, epoch, lr = int(r["num_updates"]), int(r["epoch"]), float(r["lr"])
        if schedule is NOWARMUP:
            expected = inverse_sqrt_nowarmup_lr(3e-3, 40, t)
        elif schedule is EPOCH_DECAY:
            t_k = max(int(q["num_updates"]) for q in records if int(q["epoch"]) < 3)
            expected = epoch_decay_lr(3e-3, epoch, t, 3, 0.3, t_k)
        else:
            expected = 3e-3 * math.sqrt(10 / t) if t >= 10 else 1e-7 + t * (3e-3 - 1e-7) / 10
        assert lr == pytest.approx(expected, rel=1e-4), (epoch, t)


@pytest.mark.parametrize("arch, optimizer, schedule", RUNS, ids=lambda x: x if isinstance(x, str) else x[1])
def test_train_resume_generate(tiny_data_bin, tmp_path, arch, optimizer, schedule):
    save = tmp_path / "ckpt"
    first = train(tiny_data_bin, save, arch, optimizer, schedule, max_update=25)
    losses = [float(r["loss"]) for r in json_records(first, "train_inner")]
    assert len(losses) == 25
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3, f"loss did not decrease: {losses}"
    assert (save / "checkpoint_last.pt").exists()

    second = train(tiny_data_bin, save, arch, optimizer, schedule, max_update=40)
    assert re.search(r"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ 25 updates\)", second)
    resumed = json_records(second, "train_inner")
    assert [int(r["num_updates"]) for r in resumed] == list(range(26, 41))
    check_lrs(json_records(first, "train_inner") + resumed, schedule)
    assert float(resumed[-1]["loss"]) < losses[0]

    out = run_cli(
        "fairseq-generate",
        tiny_data_bin,
        "--user-dir",
        PLUGIN_DIR.name,
        "--path",
        save / "checkpoint_last.pt",
        "--gen-subset",
        "test",
        "--beam",
        "3",
        "--batch-size",
        "20",
        "--cpu",
        cwd=PLUGIN_DIR.parent,
    )
    hypotheses = [line for line in out.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == 40 and all(len(h.split("\t")) == 3 for h in hypotheses)
    assert "BLEU4" in out
