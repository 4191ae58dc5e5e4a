"""Batch jobs on a real SLURM: a local cluster (runs.local_slurm: slurmctld, two slurmd nodes
with a fake GPU each, munge) started for this file, and every submission path run on it with
CPU workers: ``fairseq-ln-submit`` through submitit to results and a table, its ``--dry-run``
sbatch scripts submitted as written, 2 nodes x 1 task over gloo equal to one process with the
same batch, a failed training never evaluated, and preempted jobs (``scontrol requeue``, the
time-limit signal) resuming to the parameters of an uninterrupted run."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from conftest import BIN, REPO, absent

from fairseq_layernorm_plugins.runs.local_slurm import LocalCluster, missing_commands, running
from fairseq_layernorm_plugins.runs.slurm import grid, submit

TINY = """
tokens_per_update: 1000
depths: {{2L-2L: {{}}}}
generate: {{beam: 2, average_last: 1, bleu: tokenized}}
paper: {{source: "a made-up paper", metric: tokenized BLEU, compare: tokenized, bleu: {{2L-2L: {paper}}}}}
fairseq:
  task: {{_name: translation, source_lang: src, target_lang: tgt}}
  model: {{_name: {arch}, encoder_embed_dim: 32, decoder_embed_dim: 32, encoder_ffn_embed_dim: 64, decoder_ffn_embed_dim: 64,
          encoder_attention_heads: {heads}, decoder_attention_heads: 2, dropout: 0.0}}
  criterion: {{_name: cross_entropy}}
  optimizer: {{_name: adam}}
  lr_scheduler: {{_name: fixed}}
  optimization: {{lr: [0.005], max_update: {updates}}}
  dataset: {{max_tokens: 1000}}
  checkpoint: {{no_epoch_checkpoints: true, save_interval_updates: 4}}
  common: {{log_format: json, log_interval: 2, seed: 1}}
"""
pytestmark = pytest.mark.slow(3)  # a few minutes of jobs: started first (tests/conftest.py)

RECIPES = {
    "preln": dict(arch="transformer_preln", paper=12.5, heads=2, updates=8),
    "postln": dict(arch="transformer", paper="failed", heads=2, updates=8),
    "long": dict(arch="transformer_preln", paper=12.5, heads=2, updates=40),
    "admin": dict(arch="transformer_admin_iwslt_de_en", paper=12.5, heads=2, updates=24),
    "broken": dict(arch="transformer_preln", paper=12.5, heads=3, updates=8),  # 32 dims over 3 heads: fails to build
}


@pytest.fixture(scope="module")
def cluster():
    """A 2-node SLURM on this machine for the tests of this file; SLURM_CONF points at it."""
    reason = None
    if missing_commands():
        reason = f"SLURM / munge not installed (no {', '.join(missing_commands())}): .ci/run installs them"
    elif os.geteuid() != 0:
        reason = "a local SLURM cluster needs root (slurmd starts jobs as their user)"
    if reason:
        absent(reason)
    folder = tempfile.mkdtemp(prefix="fsln-slurm-")  # short: the munge socket's path is limited
    previous = os.environ.get("SLURM_CONF")
    with LocalCluster(folder, nodes=2, gpus=1) as local:
        os.environ["SLURM_CONF"] = local.env["SLURM_CONF"]
        yield local
    if previous is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = previous
    shutil.rmtree(folder)


@pytest.fixture(scope="module")
def setup(tiny_data_bin, tmp_path_factory):
    """(configs, data): the recipes above as configs/tiny/NAME.yaml, and a prepared data
    directory (bin/ and the test references)."""
    root = tmp_path_factory.mktemp("slurm")
    (root / "configs" / "tiny").mkdir(parents=True)
    for name, fields in RECIPES.items():
        (root / "configs" / "tiny" / f"{name}.yaml").write_text(TINY.format(**fields))
    shutil.copytree(tiny_data_bin, root / "data" / "bin")
    for kind in ("tok", "raw"):
        shutil.copy(tiny_data_bin.parent / "test.tgt", root / "data" / f"test.{kind}.tgt")
    return root / "configs", root / "data"


def slurm(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def job_field(job_id, field):
    """A field of ``scontrol show job`` (finished jobs are kept for MinJobAge, 300 s)."""
    return re.search(rf"\b{field}=(\S+)", slurm("scontrol", "show", "job", str(job_id))).group(1)


FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


def wait_until(condition, what, job=None, timeout=240):
    """Poll ``condition`` until true; fail on timeout, or when ``job`` has ended first."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{slurm('squeue')}")
        if job is not None and job_field(job, "JobState") in FINAL:
            assert condition(), f"job {job} ended ({job_field(job, 'JobState')}) before {what}"
        time.sleep(0.1)


def wait_done(job_id, timeout=240):
    """The job's final state, once it has left the queue."""
    wait_until(lambda: job_field(job_id, "JobState") in FINAL, f"job {job_id}", timeout=timeout)
    return job_field(job_id, "JobState")


def ln_submit(configs, data, runs, *args):
    """``fairseq-ln-submit`` as a user runs it; the job ids it printed."""
    proc = subprocess.run(
        [str(BIN / "fairseq-ln-submit"), *args, "--config-dir", str(configs), "--data", str(data), "--runs", str(runs)]
        + ["--cluster", "slurm", "--cpus-per-task", "1", "--timeout-min", "10"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return [line.split("\t")[0] for line in proc.stdout.splitlines()]


def sbatch(script):
    return slurm("sbatch", "--parsable", str(script)).strip()


def model_of(run_dir):
    return torch.load(Path(run_dir) / "checkpoints" / "checkpoint_last.pt", map_location="cpu", weights_only=False)[
        "model"
    ]


def assert_equal_models(a, b):
    assert a.keys() == b.keys()
    for key, value in a.items():
        assert torch.equal(value, b[key]), key


def resumed_at(log):
    """The updates each resumed attempt in ``log`` loaded its checkpoint at."""
    return [int(u) for u in re.findall(r"Loaded checkpoint .* \(epoch \d+ @ (\d+) updates\)", log)]


def test_submit_grid_trains_evaluates_on_rank_0_and_tables(cluster, setup, tmp_path):
    """``fairseq-ln-submit`` of a 2-recipe grid: one submitit job each, run side by side on the
    cluster's nodes; each trains, evaluates, and ``fairseq-ln-table`` reads their results."""
    configs, data = setup
    jobs = ln_submit(configs, data, tmp_path / "runs", "tiny/preln", "tiny/postln", "--cpu-workers", "1")
    assert len(jobs) == 2
    assert [wait_done(job) for job in jobs] == ["COMPLETED", "COMPLETED"]
    results = {}
    for name in ("preln", "postln"):
        run_dir = tmp_path / "runs" / "tiny" / name / "2L-2L.seed1"
        results[name] = json.loads((run_dir / "results.json").read_text())
        assert results[name]["sentences"] == 40 and results[name]["recipe"] == f"tiny/{name}"
        assert "| valid |" in (run_dir / "train.log").read_text()
    proc = subprocess.run(
        [str(BIN / "fairseq-ln-table"), str(tmp_path / "runs"), "--table", "tiny", "--out", str(tmp_path / "tiny")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    markdown = (tmp_path / "tiny.md").read_text()
    ours = results["preln"]["bleu"]["tokenized"]["score"]
    assert f"| preln | {ours:.2f} (1) | 12.50 | {ours - 12.5:+.2f} |" in markdown
    assert f"| postln | {results['postln']['bleu']['tokenized']['score']:.2f} (1) | failed |  |" in markdown


def test_sbatch_script_on_two_nodes_equals_one_process(cluster, setup, tmp_path):
    """The ``--dry-run`` sbatch script of a 2-node, 1-task-per-node CPU run, submitted with
    ``sbatch`` as written: two fairseq-train processes (one per node) meet over gloo at the
    job's first node, train one model and evaluate it once; that model is, bit for bit, one
    process accumulating the same two batches (--update-freq 2)."""
    configs, data = setup
    printed = subprocess.run(
        [str(BIN / "fairseq-ln-submit"), "tiny/preln", "--nodes", "2", "--cpu-workers", "1", "--cpus-per-task", "1"]
        + ["--dry-run", "--timeout-min", "10"]
        + ["--config-dir", str(configs), "--data", str(data), "--runs", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    job = sbatch(printed.split()[0])
    one = subprocess.Popen(  # the single process, meanwhile, outside SLURM
        [str(BIN / "fairseq-ln-train"), str(configs / "tiny" / "preln.yaml"), "--data", str(data)]
        + ["--runs", str(tmp_path / "one"), "--", "--max-tokens", "500", "--update-freq", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert wait_done(job) == "COMPLETED"
    assert one.wait(timeout=240) == 0, one.stdout.read()[-3000:]
    run_dir = tmp_path / "runs" / "tiny" / "preln" / "2L-2L.seed1"
    log = (run_dir / "train.log").read_text()
    assert "0: " in log and "1: " in log  # srun --label: both tasks
    assert sorted(re.findall(r"distributed init \(rank (\d)\): env://", log)) == ["0", "1"]
    assert "training on 2 devices" in log
    assert json.loads((run_dir / "results.json").read_text())["sentences"] == 40
    assert_equal_models(model_of(run_dir), model_of(tmp_path / "one" / "preln" / "2L-2L.seed1"))


def dry_run(configs, data, runs, recipe, *args):
    """The sbatch script ``fairseq-ln-submit --dry-run`` writes for ``recipe``."""
    printed = subprocess.run(
        [str(BIN / "fairseq-ln-submit"), recipe, "--dry-run", "--cpus-per-task", "1", "--timeout-min", "10", *args]
        + ["--cpu-workers", "1", "--config-dir", str(configs), "--data", str(data), "--runs", str(runs)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return Path(printed.split()[0])


def test_failed_training_is_never_evaluated(cluster, setup, tmp_path):
    """A run whose training fails (its model cannot be built): the job fails with the
    training's error, on both paths, and nothing is scored."""
    configs, data = setup
    [run] = grid(
        ["tiny/broken"],
        None,
        [1],
        data=str(data),
        runs=str(tmp_path / "a"),
        gpus=0,
        cpu_workers=1,
        config_dir=str(configs),
    )
    [job] = submit([run], tmp_path / "submitit", cluster="slurm", cpus_per_task=1, timeout_min=10)
    script = dry_run(configs, data, tmp_path / "b", "tiny/broken")
    batch_job = sbatch(script)
    with pytest.raises(Exception, match="embed_dim must be divisible by num_heads"):
        job.result()
    assert "exited 1" in str(job.exception())  # the training's exit, from runs.launch.train
    assert wait_done(batch_job) == "FAILED" and job_field(batch_job, "ExitCode") == "1:0"
    output = next(script.parent.glob(f"*-{batch_job}.out")).read_text()
    assert "embed_dim must be divisible by num_heads" in output and "not evaluating" in output
    for root in ("a", "b"):
        run_dir = tmp_path / root / "tiny" / "broken" / "2L-2L.seed1"
        assert (run_dir / "train.log").is_file() and not (run_dir / "results.json").exists()
        assert not (run_dir / "generate-test.log").exists()


def test_sbatch_job_preempted_twice_ends_as_an_uninterrupted_run(cluster, setup, tmp_path):
    """An sbatch job requeued with ``scontrol requeue``, then by the time-limit signal (USR1 to
    the batch shell, as ``--signal=B:USR1@120`` sends it: the script's trap requeues), resumes
    from checkpoint_last.pt each time, is scored once, at the end, and ends with the parameters
    of the same run left alone, bit for bit. Requeued once finished, it does not train again."""
    configs, data = setup
    job = sbatch(dry_run(configs, data, tmp_path / "cut", "tiny/long"))
    alone = subprocess.Popen(  # the same run left alone, meanwhile, outside SLURM
        [str(BIN / "fairseq-ln-train"), str(configs / "tiny" / "long.yaml"), "--data", str(data)]
        + ["--runs", str(tmp_path / "alone")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    run_dir = tmp_path / "cut" / "tiny" / "long" / "2L-2L.seed1"
    last = run_dir / "checkpoints" / "checkpoint_last.pt"

    def saves():
        return (run_dir / "train.log").read_text().count("Saved checkpoint") if last.exists() else 0

    wait_until(lambda: saves() >= 1, "a first checkpoint", job)
    slurm("scontrol", "requeue", job)
    wait_until(
        lambda: len(resumed_at((run_dir / "train.log").read_text())) == 1 and saves() >= 3, "a resumed save", job
    )
    slurm("scancel", "--batch", "--signal=USR1", job)
    assert wait_done(job) == "COMPLETED" and job_field(job, "Restarts") == "2"
    assert alone.wait(timeout=240) == 0, alone.stdout.read()[-3000:]
    log = (run_dir / "train.log").read_text()
    assert len(resumed_at(log)) == 2 and 0 < resumed_at(log)[0] < resumed_at(log)[1] < 40
    assert log.count("done training") == 1
    assert json.loads((run_dir / "results.json").read_text())["sentences"] == 40
    output = next((tmp_path / "cut" / "sbatch").glob(f"*-{job}.out"))  # every attempt's, appended
    assert output.read_text().count("generate test] $") == 1  # scored at the end only
    assert_equal_models(model_of(run_dir), model_of(tmp_path / "alone" / "long" / "2L-2L.seed1"))

    finished = last.read_bytes()
    slurm("scontrol", "requeue", job)
    wait_until(lambda: job_field(job, "Restarts") == "3", "the requeue")
    assert wait_done(job) == "COMPLETED"
    log = (run_dir / "train.log").read_text()
    assert "Stopping training at once (resumed finished): num_updates: 40 >= max_update: 40" in log
    assert last.read_bytes() == finished and output.read_text().count("generate test] $") == 2


DUMP = """#!/bin/bash
exec {python} {helper} "$@"
"""


def test_two_node_admin_requeued_by_its_time_limit_ends_as_an_uninterrupted_run(cluster, setup, tmp_path, monkeypatch):
    """Admin on 2 nodes x 1 CPU task through submitit: one profile (rank 0's omega broadcast:
    both ranks hold the same), kept through a requeue by the time-limit signal (submitit's
    checkpoint path), and the run ends, on both ranks, with the parameters of the same
    2-node run left alone."""
    configs, data = setup
    entry = tmp_path / "train-and-dump"
    entry.write_text(DUMP.format(python=sys.executable, helper=REPO / "tests" / "helpers" / "train_and_dump.py"))
    entry.chmod(0o755)
    jobs = {}
    for name in ("cut", "alone"):
        (tmp_path / name / "dump").mkdir(parents=True)
        monkeypatch.setenv("DUMP_DIR", str(tmp_path / name / "dump"))
        [run] = grid(
            ["tiny/admin"], None, [1], data=str(data), runs=str(tmp_path / name), gpus=0, cpu_workers=1, nodes=2,
            config_dir=str(configs), train_entry=str(entry), evaluate=name == "cut",
        )  # fmt: skip
        [jobs[name]] = submit([run], tmp_path / name / "submitit", cluster="slurm", cpus_per_task=1, timeout_min=10)
    run_dir = tmp_path / "cut" / "tiny" / "admin" / "2L-2L.seed1"
    last = run_dir / "checkpoints" / "checkpoint_last.pt"
    wait_until(
        lambda: last.exists() and "Saved checkpoint" in (run_dir / "train.log").read_text(),
        "a checkpoint",
        jobs["cut"].job_id,
    )
    submission = (tmp_path / "cut" / "submitit" / f"{jobs['cut'].job_id}_submission.sh").read_text()
    time_limit_signal = re.search(r"#SBATCH --signal=(\w+)@", submission).group(1)
    slurm("scancel", f"--signal={time_limit_signal}", jobs["cut"].job_id)
    # submitit's handler requeues with scontrol, which the requeue may kill with the rest of the
    # job: submitit then records a failure that the requeued job overwrites when it ends, so the
    # results are read once the job has left the queue
    wait_until(lambda: job_field(jobs["cut"].job_id, "Restarts") == "1", "the requeue")
    assert wait_done(jobs["cut"].job_id) == "COMPLETED" and wait_done(jobs["alone"].job_id) == "COMPLETED"
    assert jobs["alone"].results() == [None, None]  # trained, not scored (evaluate=False)
    assert jobs["cut"].results()[0]["sentences"] == 40
    log = (run_dir / "train.log").read_text()
    assert log.count("Admin: profiled 1 batch(es)") == 1
    assert "Admin: omega comes from" in log and 0 < resumed_at(log)[0] < 24
    dumps = {
        name: [
            {k.removeprefix("module."): v for k, v in torch.load(tmp_path / name / "dump" / f"rank{r}.pt").items()}
            for r in (0, 1)
        ]
        for name in jobs
    }  # each rank's model, as its trainer held it (inside fairseq's DDP wrapper)
    omegas = [key for key in dumps["cut"][0] if key.endswith("omega")]
    assert omegas and any(not torch.all(dumps["cut"][0][key] == 1) for key in omegas)
    for rank in (dumps["cut"][1], dumps["alone"][0], dumps["alone"][1]):
        assert_equal_models(dumps["cut"][0], rank)
    assert_equal_models(model_of(run_dir), dumps["cut"][0])  # and rank 0 saved it


def test_local_slurm_script_starts_one_node_and_stops_exactly_its_daemons(cluster, tmp_path):
    """``scripts/local_slurm.py`` as a user runs it, beside the file's own cluster: one idle
    node reachable through its env.sh; stopped with a job running, the job is cancelled (no
    process of it left behind) and every daemon it started is gone, the other cluster's left
    running."""
    folder = Path(tempfile.mkdtemp(prefix="fsln-one-"))
    script = [sys.executable, str(REPO / "scripts" / "local_slurm.py")]
    try:
        started = subprocess.run([*script, "start", str(folder), "--nodes", "1"], capture_output=True, text=True)
        assert started.returncode == 0, started.stderr
        assert started.stdout.strip() == f"1 node(s) idle; source {folder / 'env.sh'}"
        conf = (folder / "env.sh").read_text().split("=", 1)[1].strip()
        nodes = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %t"], env={**os.environ, "SLURM_CONF": conf}, capture_output=True, text=True
        )
        assert nodes.stdout.split() == ["n1", "idle"]
        pids = LocalCluster(folder).pids()
        assert sorted(pids) == ["munged.pid", "slurmctld.pid", "slurmd.n1.pid"]
        env = {**os.environ, "SLURM_CONF": conf}
        job = subprocess.run(
            ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 301"], env=env, capture_output=True, text=True
        )
        wait_until(lambda: subprocess.run(["pgrep", "-f", "sleep 301"]).returncode == 0, "the job to start")
        assert subprocess.run([*script, "stop", str(folder)]).returncode == 0
        assert subprocess.run(["pgrep", "-f", "sleep 301"]).returncode == 1, job.stdout  # cancelled first
        assert not any(map(running, pids.values()))  # exited (an unreaped zombie counts as exited)
        assert len(cluster.pids()) == 4  # the file's cluster: munged, slurmctld, two slurmd
    finally:
        LocalCluster(folder).stop()
        shutil.rmtree(folder)
