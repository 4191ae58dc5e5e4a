"""From a recipe, data and machines to the exact ``fairseq-train`` command.

The recipe fixes the tokens per update; the launcher spreads them over the workers:
``workers x max_tokens x update_freq = tokens_per_update`` (max_tokens capped by the
recipe's per-GPU value). Workers are GPUs on one node (fairseq spawns them), GPUs
across SLURM nodes (one task per GPU, fairseq's SLURM setup), or CPU processes under
``torchrun`` with gloo (for tests). Training resumes from ``checkpoint_last.pt`` in the
run's save dir, as fairseq does by default.
"""

import copy
import math
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from fairseq_layernorm_plugins.atomic import write_json, write_text
from fairseq_layernorm_plugins.recipes.config import fairseq_flags

PLUGIN_DIR = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PRECISIONS = ("fp32", "fp16", "bf16")


def run_dir(runs, recipe, seed):
    """Where a run of ``recipe`` (at its depth) with ``seed`` lives: RUNS/<recipe>/<depth>.seed<S>."""
    return Path(runs) / recipe.name.split("@")[0] / f"{recipe.data.get('depth', 'default')}.seed{seed}"


def data_bin(data, recipe, root):
    """The data-bin to train on: ``data`` (default: the recipe's ``data`` under ``root``),
    or its ``bin/`` when it is a prepared data directory."""
    data = Path(data or Path(root) / recipe.data["data"])
    return data / "bin" if (data / "bin").is_dir() else data


def batch_plan(tokens_per_update, max_tokens, workers):
    """(max_tokens per worker, update_freq) keeping ``tokens_per_update``: the fewest
    accumulation steps whose per-worker batch fits ``max_tokens``."""
    update_freq = max(1, math.ceil(tokens_per_update / (workers * max_tokens)))
    return tokens_per_update // (workers * update_freq), update_freq


@dataclass
class Launch:
    """One training run of a recipe (already at its depth: ``recipe.with_depth``)."""

    recipe: object
    data: str
    save_dir: str
    gpus: int = 1  # per node
    nodes: int = 1
    cpu_workers: int = 0  # > 0: CPU data-parallel processes (gloo) instead of GPUs
    precision: str = None  # default: the recipe's
    seed: int = None  # default: the recipe's
    slurm: bool = False  # one task per GPU started by srun/submitit (fairseq's SLURM setup)
    master_port: int = 29500
    train_entry: str = None  # default: fairseq-train of this environment
    extra: list = field(default_factory=list)

    @property
    def workers(self):
        return self.cpu_workers or self.gpus * self.nodes

    @property
    def effective_precision(self):
        precision = self.precision or self.recipe.data.get("precision", "fp32")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
        if self.cpu_workers and not self.precision:
            return "fp32"  # a GPU recipe's precision; on a CPU fp16/bf16 only when asked for (--precision)
        return precision

    def plan(self):
        return batch_plan(self.recipe.tokens_per_update, self.recipe.max_tokens, self.workers)

    def groups(self):
        """The recipe's fairseq config groups with this launch's data, save dir, batch
        split, seed and precision filled in (what both fairseq CLIs read)."""
        max_tokens, update_freq = self.plan()
        fairseq = copy.deepcopy(self.recipe.fairseq)
        fairseq["task"]["data"] = str(self.data)
        fairseq.setdefault("dataset", {})["max_tokens"] = max_tokens
        fairseq.setdefault("optimization", {})["update_freq"] = [update_freq]
        fairseq.setdefault("checkpoint", {})["save_dir"] = str(self.save_dir)
        common = fairseq.setdefault("common", {})
        common["user_dir"] = str(PLUGIN_DIR)
        if self.seed is not None:
            common["seed"] = self.seed
        common["fp16"], common["bf16"] = self.effective_precision == "fp16", self.effective_precision == "bf16"
        common["cpu"] = bool(self.cpu_workers)
        distributed = fairseq.setdefault("distributed_training", {})
        if self.cpu_workers > 1:  # docs/fairseq_notes.md: CPU data parallel needs gloo and legacy_ddp
            distributed.update(distributed_backend="gloo", ddp_backend="legacy_ddp")
        elif self.slurm and self.workers > 1:  # fairseq's SLURM setup: one task per GPU, rendezvous on this port
            distributed.update(distributed_world_size=self.workers, distributed_port=self.master_port)
        elif self.nodes > 1:
            raise ValueError("multi-node training runs under SLURM (scripts/submit.py)")
        elif not self.cpu_workers:  # the GPUs asked for; fairseq's default is every GPU it sees
            distributed.update(distributed_world_size=self.gpus)
        return fairseq

    def write_hydra_config(self, path):
        """The same run as a config for ``fairseq-hydra-train --config-dir DIR --config-name NAME``
        (one process per launch; multi-GPU via ``distributed_training`` as usual)."""
        import yaml

        return write_text(path, f"# {self.describe()}\n" + yaml.safe_dump(self.groups(), sort_keys=False))

    def fairseq_args(self):
        """The arguments after ``fairseq-train``."""
        return fairseq_flags(self.groups()) + list(self.extra)

    def command(self):
        """The full command line (a list); under SLURM every task (one per GPU) runs it."""
        entry = self.train_entry or str(BIN / "fairseq-train")
        if self.cpu_workers > 1:
            return [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc_per_node",
                str(self.cpu_workers),
                "--master_port",
                str(self.master_port),
                entry,
                *self.fairseq_args(),
            ]
        return [entry, *self.fairseq_args()]

    def describe(self):
        max_tokens, update_freq = self.plan()
        return (
            f"{self.recipe.name}: {self.workers} {'CPU process' if self.cpu_workers else 'GPU'}(s) x {max_tokens} tokens x "
            f"update-freq {update_freq} = {self.workers * max_tokens * update_freq} tokens/update "
            f"(recipe: {self.recipe.tokens_per_update}), {self.effective_precision}"
        )

    def record(self):
        """What evaluation and tables need to know about this run (written as run.json)."""
        recipe = self.recipe
        return {
            "recipe": recipe.name.split("@")[0],
            "depth": recipe.data.get("depth"),
            "data": str(self.data),
            "save_dir": str(self.save_dir),
            "workers": self.workers,
            "precision": self.effective_precision,
            "plan": dict(zip(("max_tokens", "update_freq"), self.plan())),
            "generate": recipe.data.get("generate", {}),
            "paper": recipe.data.get("paper"),
            "task": recipe.fairseq["task"]["_name"],
            "source_lang": recipe.fairseq["task"].get("source_lang"),  # None for a language model
            "target_lang": recipe.fairseq["task"].get("target_lang"),
            "command": shlex.join(self.command()),
        }


def process_rank():
    """This process's rank in a multi-process job (SLURM's task id, torchrun's RANK), else 0."""
    return int(os.environ.get("SLURM_PROCID", os.environ.get("RANK", 0)))


def write_record(run_dir, launch):
    """``run_dir/run.json``, written by rank 0 only (every task of a submitit / srun job runs
    this), through a temp file of its own, then renamed."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if process_rank() != 0:
        return
    write_json(run_dir / "run.json", launch.record())


def train_log(run_dir):
    """``train.log`` for rank 0; ``train.rank<N>.log`` for the other tasks of a job."""
    rank = process_rank()
    return Path(run_dir) / ("train.log" if rank == 0 else f"train.rank{rank}.log")


def run_logged(cmd, log_path, label, echo=lambda line: True, env=None):
    """Run ``cmd``, appending its output to ``log_path`` and echoing the lines ``echo``
    selects (progress); raise with the log's tail if it fails."""
    print(f"[{label}] $ {shlex.join(map(str, cmd))}", flush=True)
    with (
        open(log_path, "a", buffering=1) as log,  # line-buffered: `tail -f train.log` shows progress
        subprocess.Popen(
            list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        ) as proc,
    ):
        for line in proc.stdout:
            log.write(line)
            if echo(line):
                print(f"[{label}] {line.rstrip()}", flush=True)
    if proc.returncode:
        tail = "".join(Path(log_path).read_text().splitlines(keepends=True)[-20:])
        raise RuntimeError(f"[{label}] exited {proc.returncode}; see {log_path}:\n{tail}")


def is_progress(line):
    return any(
        tag in line
        for tag in (
            "| train_inner |",
            "| valid |",
            "| train |",
            "Admin: profiled",
            "loaded checkpoint",
            "done training",
        )
    )


def train(launch, run_dir, env=None):
    """Write ``run_dir/run.json`` and run the training, logging to ``run_dir/train.log``
    (each task of a multi-process job: see :func:`write_record`, :func:`train_log`)."""
    run_dir = Path(run_dir)
    write_record(run_dir, launch)
    print(launch.describe(), flush=True)
    if (Path(launch.save_dir) / "checkpoint_last.pt").exists():
        print(f"resuming from {Path(launch.save_dir) / 'checkpoint_last.pt'}", flush=True)
    run_logged(launch.command(), train_log(run_dir), launch.recipe.name, is_progress, env)
    return run_dir
