"""A grid through submitit's local executor to results and a table; sbatch dry-run
scripts; the table layout and the curve plot."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from fairseq_layernorm_plugins.experiments.curves import read_log_curves
from fairseq_layernorm_plugins.experiments.report import main as make_table
from fairseq_layernorm_plugins.experiments.report import render, table_rows
from fairseq_layernorm_plugins.runs.slurm import grid, submit, write_sbatch

TINY = """
tokens_per_update: 1000
depths: {{2L-2L: {{}}}}
generate: {{beam: 2, average_last: 1, bleu: tokenized}}
paper: {{source: "a made-up paper", metric: tokenized BLEU, compare: tokenized, bleu: {{2L-2L: {paper}}}}}
fairseq:
  task: {{_name: translation, source_lang: src, target_lang: tgt}}
  model: {{_name: {arch}, encoder_embed_dim: 32, decoder_embed_dim: 32, encoder_ffn_embed_dim: 64, decoder_ffn_embed_dim: 64,
          encoder_attention_heads: 2, decoder_attention_heads: 2}}
  criterion: {{_name: cross_entropy}}
  optimizer: {{_name: adam}}
  lr_scheduler: {{_name: fixed}}
  optimization: {{lr: [0.005], max_update: 30}}
  dataset: {{max_tokens: 1000}}
  checkpoint: {{no_epoch_checkpoints: true}}
  common: {{log_format: json, log_interval: 5, seed: 1}}
"""


@pytest.fixture
def tiny_setup(tiny_data_bin, tmp_path):
    configs = tmp_path / "configs" / "tiny"
    configs.mkdir(parents=True)
    (configs / "preln.yaml").write_text(TINY.format(arch="transformer_preln", paper=12.5))
    (configs / "postln.yaml").write_text(TINY.format(arch="transformer", paper="failed"))
    data = tmp_path / "data"
    shutil.copytree(tiny_data_bin, data / "bin")
    for kind in ("tok", "raw"):
        shutil.copy(tiny_data_bin.parent / "test.tgt", data / f"test.{kind}.tgt")
    return tmp_path / "configs", data


def test_grid_of_two_jobs_through_submitit_local_to_results_and_table(tiny_setup, tmp_path):
    configs, data = tiny_setup
    runs = grid(
        ["tiny/preln", "tiny/postln"],
        None,
        [1],
        data=str(data),
        runs=str(tmp_path / "runs"),
        gpus=0,
        cpu_workers=1,
        config_dir=str(configs),
    )
    jobs = submit(runs, tmp_path / "submitit", cluster="local", timeout_min=10)
    results = [job.result() for job in jobs]
    assert [r["recipe"] for r in results] == ["tiny/preln", "tiny/postln"]
    for run, result in zip(runs, results):
        assert json.loads((run.run_dir() / "results.json").read_text()) == result
        assert result["sentences"] == 40 and result["bleu"]["tokenized"]["score"] >= 0

    make_table([str(tmp_path / "runs"), "--table", "tiny", "--out", str(tmp_path / "report" / "tiny")])
    markdown = (tmp_path / "report" / "tiny.md").read_text()
    ours = {r["recipe"].split("/")[1]: r["bleu"]["tokenized"]["score"] for r in results}
    assert f"| preln | {ours['preln']:.2f} (1) | 12.50 | {ours['preln'] - 12.5:+.2f} |" in markdown
    assert f"| postln | {ours['postln']:.2f} (1) | failed |  |" in markdown
    assert "paper: a made-up paper; tokenized BLEU" in markdown
    assert (tmp_path / "report" / "tiny.csv").read_text().splitlines()[
        0
    ] == "method,depth,ours_mean,ours_std,seeds,paper,diff"
    png = tmp_path / "report" / "tiny.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    curves = read_log_curves(runs[0].run_dir() / "train.log")
    assert [p["update"] for p in curves["train"]] == [5, 10, 15, 20, 25, 30] and curves["valid"]
    assert curves["train"][-1]["epoch"] > curves["train"][0]["epoch"] > 0


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
    command = next(line for line in script.splitlines() if line.startswith("srun --label "))
    for flags in (
        "--arch transformer_admin_wmt_en_de",
        "--encoder-layers 18 --decoder-layers 18",
        "--optimizer radam",
        "--max-tokens 4098",
        "--update-freq 1",
        "--fp16",
        "--seed 2",
        "--distributed-world-size 8",
        "--distributed-port 29500",
        "/data/wmt14.en-de",
        str(tmp_path / "runs" / "wmt14" / "admin" / "admin" / "18L-18L.seed2" / "checkpoints"),
    ):
        assert flags in command, flags
    assert "evaluate.py" in script.splitlines()[-1]


STUBS = {
    "srun": 'echo "srun $*" >> "$CALLS"; echo $$ > "$STUB_DIR/srun.pid"; [ -n "$SRUN_EXIT" ] && exit "$SRUN_EXIT"; exec sleep 60',
    "scontrol": 'echo "scontrol $*" >> "$CALLS"',
    "python": 'echo "python $*" >> "$CALLS"',
}


def run_sbatch(tmp_path, srun_exit=None, send_usr1=False):
    """Run a generated sbatch script under bash with stub srun / scontrol / python on PATH;
    return (exit status, the stubs' recorded calls)."""
    run = grid(["iwslt14/admin"], None, [1], data="/data/iwslt14", runs=str(tmp_path / "runs"), gpus=2)[0]
    script = write_sbatch(run, tmp_path / "sbatch")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name, body in STUBS.items():
        (stubs / name).write_text("#!/bin/bash\n" + body + "\n")
        (stubs / name).chmod(0o755)
    calls = tmp_path / "calls"
    env = {
        **os.environ,
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "CALLS": str(calls),
        "STUB_DIR": str(stubs),
        "SLURM_JOB_ID": "4242",
        **({"SRUN_EXIT": str(srun_exit)} if srun_exit is not None else {}),
    }
    proc = subprocess.Popen(["bash", str(script)], env=env)
    try:
        if send_usr1:
            deadline = time.monotonic() + 30
            while not (stubs / "srun.pid").is_file() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)  # the script is in `wait` by now
            proc.send_signal(signal.SIGUSR1)
        status = proc.wait(timeout=30)
    finally:
        if (stubs / "srun.pid").is_file():
            subprocess.run(["kill", (stubs / "srun.pid").read_text().strip()], capture_output=True)
    return status, calls.read_text().splitlines() if calls.is_file() else []


def test_sbatch_requeues_on_usr1_without_evaluating(tmp_path):
    status, calls = run_sbatch(tmp_path, send_usr1=True)
    assert status == 0 and [c.split()[0] for c in calls] == ["srun", "scontrol"]
    assert calls[1] == "scontrol requeue 4242"


@pytest.mark.parametrize("srun_exit, evaluated", [(0, True), (1, False)])
def test_sbatch_evaluates_only_after_training_ends_by_itself(tmp_path, srun_exit, evaluated):
    status, calls = run_sbatch(tmp_path, srun_exit=srun_exit)
    assert status == srun_exit
    assert [c.split()[0] for c in calls] == ["srun", "python"] if evaluated else ["srun"]
    if evaluated:
        assert calls[1].endswith("scripts/evaluate.py " + str(tmp_path / "runs" / "iwslt14" / "admin" / "6L-6L.seed1"))


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
    entry.write_text('#!/bin/bash\necho "rank $SLURM_PROCID | train_inner | done"\n')
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
    assert set((run_dir / "train.log").read_text().splitlines()) == {"rank 0 | train_inner | done"}
    assert set((run_dir / "train.rank1.log").read_text().splitlines()) == {"rank 1 | train_inner | done"}
    assert sorted(p.name for p in run_dir.iterdir()) == ["run.json", "train.log", "train.rank1.log"]
