"""End to end through the real command-line tools on tiny data: ``fairseq-train
--user-dir`` for each architecture, resume from ``checkpoint_last.pt`` (the same run as
without the interruption), and ``fairseq-generate --user-dir``. New methods are covered by
registering them."""

import math
import os
import re
import shutil
import subprocess

import pytest
import torch
from conftest import BIN, PLUGIN_DIR, TINY_MODEL, assert_bleu_line_is_sacrebleu, json_records, plugin_archs, run_cli

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

# (arch, optimizer flags, schedule flags): every model once, with its recipe's kind of
# optimizer and schedule (configs/iwslt14/: Admin's RAdam, Pre-LN's epoch decay, T-Fixup
# without warm-up, Adam with warm-up for the rest), so that each new optimizer and schedule
# trains and resumes once
RESUME_AT = 7  # in epoch 1, after RAdam (beta2 0.98) has started to rectify (t = 6); compared at 3x
RECIPE_RUNS = {
    "transformer_admin_iwslt_de_en": (RADAM, WARMUP),
    "transformer_preln_iwslt_de_en": (ADAM, EPOCH_DECAY),
    "transformer_tfixup_iwslt_de_en": (ADAM, NOWARMUP),
}
RUNS = [(arch, *RECIPE_RUNS.get(arch, (ADAM, WARMUP))) for arch in MODEL_ARCHS]


def train(data_bin, save_dir, arch, optimizer, schedule, max_update, *extra):
    # exactly the README's form: run from the repository root with a relative --user-dir;
    # dropout 0, so that a resumed run can be compared with the uninterrupted one bit for bit
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
        "--dropout",
        "0",
        *extra,
        cwd=PLUGIN_DIR.parent,
    )


def assert_identical(a, b, where=""):
    """Two checkpoint entries (nested dicts / lists of tensors and numbers) equal bit for bit."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_identical(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{where}[{i}]")
    elif torch.is_tensor(a):
        assert torch.equal(a, b), f"{where}: differs by up to {(a.double() - b.double()).abs().max().item():.3g}"
    else:
        assert a == b, where


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
    """25 updates, saving every 7; the checkpoint at update 7 as another run's checkpoint_last.pt,
    resumed to update 21, logs the same losses and lrs and ends with the same model and optimizer
    state as the checkpoint at 21, bit for bit (a resume that lost or altered any state shows);
    the lr at every update is the schedule's formula; fairseq-generate's BLEU line is sacreBLEU's
    on its output.

    The resume is inside epoch 1 (10 updates): fairseq-fixed cuts a resumed run's batches
    under seed + the resume epoch, so stock transformer resumed in a later epoch trains on
    other batches (the plugin's resume_batches patch fixes that for its own archs only)."""
    whole, resumed_dir = tmp_path / "whole", tmp_path / "resumed"
    first = train(tiny_data_bin, whole, arch, optimizer, schedule, 25, "--save-interval-updates", RESUME_AT)
    records = json_records(first, "train_inner")
    losses = [float(r["loss"]) for r in records]
    assert [int(r["num_updates"]) for r in records] == list(range(1, 26))
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3, f"loss did not decrease: {losses}"
    check_lrs(records, schedule)
    resumed_dir.mkdir()
    shutil.copy(whole / f"checkpoint_1_{RESUME_AT}.pt", resumed_dir / "checkpoint_last.pt")

    second = train(tiny_data_bin, resumed_dir, arch, optimizer, schedule, 3 * RESUME_AT)
    assert re.search(rf"Loaded checkpoint .*checkpoint_last\.pt \(epoch 1 @ {RESUME_AT} updates\)", second)
    resumed = json_records(second, "train_inner")
    assert [int(r["num_updates"]) for r in resumed] == list(range(RESUME_AT + 1, 3 * RESUME_AT + 1))
    assert [(r["loss"], r["lr"]) for r in resumed] == [(r["loss"], r["lr"]) for r in records[RESUME_AT : 3 * RESUME_AT]]
    (at_21,) = whole.glob(f"checkpoint_*_{3 * RESUME_AT}.pt")
    reference, state = (
        torch.load(path, map_location="cpu", weights_only=False) for path in (at_21, resumed_dir / "checkpoint_last.pt")
    )
    assert_identical(state["model"], reference["model"], "model")
    assert_identical(state["last_optimizer_state"], reference["last_optimizer_state"], "optimizer")

    # decoded in this process (run_cli: fairseq-generate's cli_main), the fresh process and the
    # relative --user-dir of the README's form being the two trainings' above
    out = run_cli(
        "fairseq-generate",
        tiny_data_bin,
        "--user-dir",
        PLUGIN_DIR,
        "--path",
        resumed_dir / "checkpoint_last.pt",
        "--gen-subset",
        "test",
        "--beam",
        "3",
        "--batch-size",
        "20",
        "--cpu",
    )
    hypotheses = [line for line in out.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == 40 and all(len(h.split("\t")) == 3 for h in hypotheses)
    assert_bleu_line_is_sacrebleu(out)


# docs/usage.md's command blocks as written, on tiny data: the data paths point at a tiny
# data-bin, checkpoints/ at a temporary folder, and each fairseq command (a shell function
# in front of it) gets a tiny model and 2 updates appended
DOC_TINY = {
    "fairseq-train": " ".join(TINY_MODEL) + " --max-update 2",
    "fairseq-generate": "",
    "fairseq-eval-lm": "",
}
DOC_TINY_LM = (
    "--decoder-layers 1 --decoder-embed-dim 32 --decoder-ffn-embed-dim 64 --decoder-attention-heads 2 "
    "--decoder-input-dim 32 --decoder-output-dim 32 --adaptive-input-cutoff 8,16 --adaptive-softmax-cutoff 8,16 "
    "--max-update 1"
)


def usage_block(heading):
    """The first ```bash block under ``heading`` in docs/usage.md."""
    text = (PLUGIN_DIR.parent / "docs" / "usage.md").read_text()
    section = text.split(f"\n{heading}\n", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def run_usage_block(block, replacements, train_flags, tmp_path):
    """Run ``block`` under bash -e from the repository root, as pasted but for ``replacements``."""
    for old, new in replacements.items():
        block = block.replace(old, str(new))
    block = block.replace("source .venv/bin/activate", f"source {BIN / 'activate'}")
    block = block.replace("checkpoints/", f"{tmp_path}/checkpoints/")
    prelude = "set -euo pipefail\n" + "".join(
        f'{tool}() {{ command {tool} "$@" {train_flags if tool == "fairseq-train" else flags}; }}\n'
        for tool, flags in DOC_TINY.items()
    )
    proc = subprocess.run(
        ["bash", "-c", prelude + block],
        cwd=PLUGIN_DIR.parent,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{BIN}:{os.environ['PATH']}"},  # the venv, activated
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    return out


@pytest.fixture(scope="session")
def tiny_joined_data_bin(tiny_data_bin):
    """The tiny task with one dictionary for both sides (``--share-all-embeddings``)."""
    root = tiny_data_bin.parent
    run_cli(
        "fairseq-preprocess",
        *("--source-lang", "src", "--target-lang", "tgt", "--joined-dictionary", "--workers", "1"),
        *("--trainpref", root / "train", "--validpref", root / "valid", "--testpref", root / "test"),
        *("--destdir", root / "joined"),
        in_process=True,
    )
    return root / "joined"


def test_usage_language_model_commands_run_as_written(lm_data_bin, tmp_path):
    """The language-model block of docs/usage.md: fairseq-train with adaptive_loss (which
    refuses fairseq's default --ddp-backend) and fairseq-eval-lm of its checkpoint."""
    block = usage_block("## Language models")
    out = run_usage_block(
        block,
        {"fairseq-ln-prepare wikitext2": ":", "data/wikitext-2/bin": lm_data_bin},
        DOC_TINY_LM,
        tmp_path,
    )
    assert "done training" in out and "Perplexity:" in out


@pytest.mark.slow(1.5)
def test_usage_paper_commands_run_as_written(tiny_data_bin, tiny_joined_data_bin, tmp_path):
    """Every command of docs/usage.md's "Commands, paper by paper" block, in order (Admin's
    profile, then a seed from it; the export; decoding the Pre-LN run)."""
    block = usage_block("## Commands, paper by paper")
    replacements = {"data-bin/iwslt14.tokenized.de-en": tiny_data_bin, "data-bin/wmt14_en_de": tiny_joined_data_bin}
    out = run_usage_block(block, replacements, DOC_TINY["fairseq-train"], tmp_path)
    assert out.count("done training") == 6 and "(--admin-profile-from); not profiling" in out
    assert (tmp_path / "checkpoints" / "admin" / "postln.pt").is_file()
    assert_bleu_line_is_sacrebleu(out)


def test_readme_fairseq_train_example_runs_as_written(tiny_data_bin, tmp_path):
    """The README's first block, `fairseq-train DATA --user-dir fairseq_layernorm_plugins ...`,
    run from the repository root as pasted (DATA a tiny data-bin, a tiny model for 2 updates)."""
    readme = (PLUGIN_DIR.parent / "README.md").read_text()
    block = re.search(r"```bash\n(fairseq-train DATA .*?)```", readme, re.S).group(1)
    block = block.replace("fairseq-train DATA", f"fairseq-train {tiny_data_bin}", 1)
    train_flags = DOC_TINY["fairseq-train"] + f" --cpu --save-dir {tmp_path}/checkpoints"
    out = run_usage_block(block, {}, train_flags, tmp_path)
    assert "done training" in out and "transformer_admin_iwslt_de_en" in out
