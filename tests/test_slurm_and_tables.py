"""What a grid's sbatch scripts say, the tasks of one job sharing a run directory, the table
layout and the curve plot (submitting to a real SLURM: test_slurm_cluster.py)."""

import json
import os
import subprocess
import sys

import pytest

from fairseq_layernorm_plugins.experiments.curves import read_log_curves
from fairseq_layernorm_plugins.experiments.report import render, table_rows
from fairseq_layernorm_plugins.runs.slurm import grid, write_sbatch


def test_sbatch_dry_run_names_resources_and_command(tmp_path):
    runs = grid(
        ["wmt14/admin/admin"],
        ["18L-18L"],
        [1, 2],
        data="/data/wmt14.en-de",
        runs=str(tmp_path / "runs"),
        gpus=4,
        nodes=2,
    )
    paths = [write_sbatch(run, tmp_path / "sbatch", timeout_min=2880, partition="gpu") for run in runs]
    assert [p.name for p in paths] == ["wmt14.admin.admin-18L-18L-s1.sbatch", "wmt14.admin.admin-18L-18L-s2.sbatch"]
    script = paths[1].read_text()
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --time=48:00:00",
        "#SBATCH --partition=gpu",
        "#SBATCH --requeue",
        "#SBATCH --signal=B:USR1@120",
    ):
        assert line in script.splitlines()
    command = next(line for line in script.splitlines() if line.startswith("srun -K --label "))
    assert command.startswith(
        """srun -K --label bash -c 'exec "$@" --distributed-rank "$SLURM_PROCID" --device-id "$SLURM_LOCALID"' """
    )  # every task one fairseq-train process, its rank and GPU from SLURM (runs.launch.RANK_FLAGS)
    assert "export MASTER_ADDR MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))" in script.splitlines()
    for flags in (
        "--arch transformer_admin_wmt_en_de",
        "--encoder-layers 18 --decoder-layers 18",
        "--optimizer radam",
        "--max-tokens 4098",
        "--update-freq 1",
        "--fp16",
        "--seed 2",
        "--distributed-world-size 8",
        "--distributed-init-method env://",
        "--distributed-no-spawn",
        "/data/wmt14.en-de",
        str(tmp_path / "runs" / "wmt14" / "admin" / "admin" / "18L-18L.seed2" / "checkpoints"),
    ):
        assert flags in command, flags
    assert "fairseq-ln-evaluate" in script.splitlines()[-1]


def test_a_training_that_exits_0_unfinished_is_not_evaluated(tmp_path):
    """A job's training that exits 0 without reaching its end (fairseq's "done training"): the
    job fails there and nothing is scored (a checkpoint from an earlier attempt would be)."""
    entry = tmp_path / "fake-train"
    entry.write_text('#!/bin/bash\necho "| train_inner | num_updates 1"\n')
    entry.chmod(0o755)
    [run] = grid(
        ["iwslt14/admin"], None, [1], data="/data/iwslt14", runs=str(tmp_path / "runs"), train_entry=str(entry)
    )
    with pytest.raises(RuntimeError, match="exited 0 without fairseq's 'done training'"):
        run()
    assert sorted(p.name for p in run.run_dir().iterdir()) == ["run.json", "train.log"]


def test_table_layout_mean_std_and_difference():
    def result(recipe, depth, score, seed_offset=0.0):
        return {
            "recipe": recipe,
            "depth": depth,
            "headline": "sacrebleu",
            "bleu": {
                "compound_split": {"score": score + seed_offset, "label": "tokenized BLEU, compound-split"},
                "sacrebleu": {"score": 0.0, "label": "SacreBLEU"},
            },
            "paper": {
                "compare": "compound_split",
                "source": "Admin Table 1",
                "metric": "BLEU",
                "bleu": {"6L-6L": 27.80, "18L-18L": "failed"},
            },
        }

    results = [
        result("wmt14/admin/postln", "6L-6L", 27.0),
        result("wmt14/admin/postln", "6L-6L", 27.0, 1.0),
        result("wmt14/admin/postln", "18L-18L", 0.3),
        result("iwslt14/postln", "6L-6L", 35.0),
    ]
    rows = table_rows(results, "wmt14/admin")
    markdown, table_csv = render(rows, "wmt14/admin")
    assert (
        "| method | 6L-6L ours | 6L-6L paper | 6L-6L diff | 18L-18L ours | 18L-18L paper | 18L-18L diff |" in markdown
    )
    assert "| postln | 27.50 +- 0.71 (2) | 27.80 | -0.30 | 0.30 (1) | failed |  |" in markdown
    assert "postln,6L-6L,27.50,0.71,2,27.80,-0.30" in table_csv and "iwslt" not in table_csv


def test_log_curves_place_a_validation_between_logged_updates(tmp_path):
    """A validation at an update that no train_inner line logged (the end of a
    time-budgeted run) lands at its extrapolated epoch, not at the next epoch."""
    inner = (
        '2026 | INFO | train_inner | {{"epoch": 3, "update": {e}, "loss": "5.0", "num_updates": "{u}", "wall": "{w}"}}'
    )
    lines = [inner.format(e=2.0 + u / 250, u=500 + u, w=100 + u) for u in (25, 50, 75, 100)]
    lines.append(
        '2026 | INFO | valid | {"epoch": 3, "valid_loss": "4.9", "valid_nll_loss": "3.5", "valid_num_updates": "610"}'
    )
    lines.append(
        '2026 | INFO | train | {"epoch": 3, "train_loss": "4.9", "train_num_updates": "610", "train_wall": "212"}'
    )
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    curves = read_log_curves(tmp_path / "train.log")
    assert curves["valid"][0]["epoch"] == pytest.approx(2.0 + 110 / 250)  # 250 updates per epoch, as logged
    assert curves["end"] == {"update": 610, "wall": 212.0}


def test_log_curves_of_a_resumed_run_keep_the_second_telling_of_the_rerun_stretch(tmp_path):
    """A run stopped at update 75 after checkpointing at 50 logs 75 twice, and a validation
    at 75 from the lost stretch: the curves hold each update once, from the resumed run."""
    inner = (
        '2026 | INFO | train_inner | {{"epoch": 1, "update": {e}, "loss": "{l}", "num_updates": "{u}", "wall": "{w}"}}'
    )
    valid = (
        '2026 | INFO | valid | {{"epoch": 1, "valid_loss": "{l}", "valid_nll_loss": "{l}", "valid_num_updates": "{u}"}}'
    )
    overflow = "2026 | INFO | fairseq.trainer | NOTE: gradient overflow detected, ignoring gradient, setting loss scale"
    lines = [inner.format(e=u / 100, l=9.0, u=u, w=u) for u in (25, 50)]
    lines += [overflow, valid.format(l=8.0, u=50), inner.format(e=0.75, l=7.0, u=75, w=75), valid.format(l=6.5, u=75)]
    lines.insert(1, overflow)  # between updates 25 and 50: before the checkpoint
    lines.append("2026 | INFO | fairseq.trainer | Loaded checkpoint /r/checkpoint_last.pt (epoch 1 @ 50 updates)")
    lines += [inner.format(e=0.75, l=6.0, u=75, w=0), overflow, inner.format(e=1.0, l=5.0, u=100, w=0)]
    lines.append(valid.format(l=5.5, u=100))
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    curves = read_log_curves(tmp_path / "train.log")
    assert [(p["update"], p["loss"]) for p in curves["train"]] == [(25, 9.0), (50, 9.0), (75, 6.0), (100, 5.0)]
    assert [(v["update"], v["loss"]) for v in curves["valid"]] == [(50, 8.0), (100, 5.5)]
    assert curves["end"]["update"] == 100
    assert curves["overflows"] == [25, 75]  # the one after update 50 was in the stretch trained again


RANK_WORKER = """
import sys
from fairseq_layernorm_plugins.runs.launch import Launch, train
from fairseq_layernorm_plugins.runs.slurm import grid
run = grid(["iwslt14/admin"], None, [1], data=sys.argv[1], runs=sys.argv[2], gpus=2)[0]
launch = run.launch()
launch.train_entry = sys.argv[3]
for _ in range(20):
    train(launch, run.run_dir())
"""


def test_tasks_of_one_job_leave_one_record_and_a_log_each(tmp_path):
    """Every task of a 2-GPU submitit job runs GridRun: run.json comes from rank 0 alone
    (atomically, however the tasks interleave), and each rank logs to its own file."""
    entry = tmp_path / "fake-train"
    entry.write_text('#!/bin/bash\necho "rank $SLURM_PROCID | train_inner | done training"\n')
    entry.chmod(0o755)
    runs = tmp_path / "runs"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_WORKER, "/data/iwslt14", str(runs), str(entry)],
            env={**os.environ, "SLURM_PROCID": str(rank)},
            stdout=subprocess.DEVNULL,
        )
        for rank in (0, 1)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    run = grid(["iwslt14/admin"], None, [1], data="/data/iwslt14", runs=str(runs), gpus=2)[0]
    run_dir, launch = run.run_dir(), run.launch()
    launch.train_entry = str(entry)
    assert json.loads((run_dir / "run.json").read_text()) == json.loads(json.dumps(launch.record(run_dir)))
    assert launch.record(run_dir)["save_dir"] == "checkpoints"  # inside the run: copied or moved with it
    assert set((run_dir / "train.log").read_text().splitlines()) == {"rank 0 | train_inner | done training"}
    assert set((run_dir / "train.rank1.log").read_text().splitlines()) == {"rank 1 | train_inner | done training"}
    assert sorted(p.name for p in run_dir.iterdir()) == ["run.json", "train.log", "train.rank1.log"]


def test_a_headline_table_puts_r1_r2_rl_beside_the_papers():
    """A headline run's cell is rouge-score's R-1, R-2 and R-L, each beside the paper's number
    of that column (from the recipe's ``paper.rouge`` triple) and the difference."""

    def result(recipe, depth, r1, paper):
        value = {"rouge1": r1, "rouge2": r1 / 2, "rougeL": r1 - 1, "label": "F1 ROUGE (rouge-score)"}
        return {
            "recipe": recipe,
            "depth": depth,
            "headline": "rouge",
            "rouge": {"rouge": value, "rouge_perl": {"skipped": "no perl"}},
            "paper": {"source": "B2T Table 2", "metric": "F1 ROUGE", "compare": "rouge", "rouge": paper},
        }

    paper = {"6L-6L": [38.57, 19.37, 35.79], "18L-18L": "failed"}
    results = [
        result("gigaword/postln", "6L-6L", 30.0, paper),
        result("gigaword/postln", "6L-6L", 32.0, paper),
        result("gigaword/postln", "18L-18L", 4.0, paper),
    ]
    markdown, table_csv = render(table_rows(results, "gigaword"), "gigaword")
    header = [
        f"{d} {c} {k}" for d in ("6L-6L", "18L-18L") for c in ("R-1", "R-2", "R-L") for k in ("ours", "paper", "diff")
    ]
    assert "| method | " + " | ".join(header) + " |" in markdown
    row = "| postln | 31.00 +- 1.41 (2) | 38.57 | -7.57 | 15.50 +- 0.71 (2) | 19.37 | -3.87 | 30.00 +- 1.41 (2) | 35.79 | -5.79 |"
    assert row + " 4.00 (1) | failed |  | 2.00 (1) | failed |  | 3.00 (1) | failed |  |" in markdown
    assert "postln,6L-6L R-2,15.50,0.71,2,19.37,-3.87" in table_csv
