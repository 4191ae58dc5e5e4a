"""From a recipe, data and machines to the exact ``fairseq-train`` command.

The recipe fixes the tokens per update; the launcher spreads them over the workers:
``workers x max_tokens x update_freq = tokens_per_update`` (max_tokens capped by the
recipe's per-GPU value). Workers are GPUs on one node (fairseq spawns them), CPU processes
started by ``torchrun`` on one machine, or SLURM tasks (GPUs or CPU processes, one task each,
on one node or several). A process per worker runs the same ``fairseq-train`` command: the
world size and the ``env://`` init method (``MASTER_ADDR`` / ``MASTER_PORT``: torchrun's, or
the first node of the SLURM job, :func:`runs.slurm.rendezvous`) in its flags, its own rank
(``--distributed-rank``, and ``--device-id`` under SLURM) added from its launcher's
environment (:data:`RANK_FLAGS`). fairseq's own inference of these from SLURM or torchrun
divides by the GPU count, so it fails on CPU nodes (docs/fairseq_notes.md); the same
explicit flags serve GPU and CPU runs, so what runs on CPU nodes is what runs on GPU ones.
CPU workers use gloo and ``legacy_ddp``. Training resumes from ``checkpoint_last.pt`` in the
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
# what each worker process runs (bash -c SCRIPT NAME fairseq-train ARGS): the command given as
# its arguments with this process's rank from its launcher's environment
RANK_FLAGS = {
    "torchrun": 'exec "$@" --distributed-rank "$RANK"',
    "slurm": 'exec "$@" --distributed-rank "$SLURM_PROCID" --device-id "$SLURM_LOCALID"',
}


def run_dir(runs, recipe, seed):
    """Where a run of ``recipe`` (at its depth) with ``seed`` lives: RUNS/<recipe>/<depth>.seed<S>."""
    return Path(runs) / recipe.name.split("@")[0] / f"{recipe.data.get('depth', 'default')}.seed{seed}"


def data_bin(data, recipe, root):
    """The data-bin to train on: ``data`` (default: the recipe's ``data`` under ``root``),
    or its ``bin/`` when it is a prepared data directory."""
    if not data and not recipe.data.get("data"):
        raise ValueError(f"{recipe.path}: the recipe names no data: give --data")
    data = Path(data or Path(root) / recipe.data["data"])
    return data / "bin" if (data / "bin").is_dir() else data


def passed_value(extra, flag, default):
    """The value of ``flag`` among the fairseq arguments ``extra`` (``--x v`` or ``--x=v``; the
    last one given wins, as in argparse), else ``default``."""
    value = default
    for i, arg in enumerate(extra):
        if arg == flag and i + 1 < len(extra):
            value = extra[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def check_data_bin(data, recipe, extra=()):
    """Raise ValueError (naming the folder) unless ``data`` is a fairseq data-bin ``recipe`` can
    train on: a folder with the dictionaries its task reads (dict.<lang>.txt for each side of a
    translation, dict.txt for a language model; for speech config.yaml and the manifests of the
    sets it trains and validates on, as ``extra`` (the arguments after ``--``) may name them).
    Checked before a run writes anything."""
    data = Path(str(data).split(":")[0])  # fairseq's DATA may list shards: a:b:c
    if not data.is_dir():
        raise ValueError(f"{data}: no such data directory")
    task = recipe.fairseq.get("task") or {}
    if task.get("_name") == "speech_to_text":  # fairseq-ln-prepare librispeech's folder
        config = passed_value(extra, "--config-yaml", task.get("config_yaml", "config.yaml"))
        if not (data / config).is_file():
            raise ValueError(f"{data}: not a fairseq speech_to_text folder (no {config}: fairseq-ln-prepare librispeech)")
        dataset = recipe.fairseq.get("dataset") or {}
        subsets = [
            passed_value(extra, f"--{kind}-subset", dataset.get(f"{kind}_subset", kind)) for kind in ("train", "valid")
        ]
        missing = [f"{name}.tsv" for name in ",".join(subsets).split(",") if not (data / f"{name}.tsv").is_file()]
        if missing:
            raise ValueError(
                f"{data}: no {', '.join(missing)} (prepared without it: name the sets to train and validate on "
                "after --, e.g. -- --train-subset train-clean-100 --valid-subset dev-clean)"
            )
        return data
    if task.get("_name") == "language_modeling":
        needed = ["dict.txt"]
    else:
        needed = [f"dict.{task[side]}.txt" for side in ("source_lang", "target_lang") if task.get(side)]
    missing = [name for name in needed if not (data / name).is_file()]
    if missing or not any(data.glob("dict*.txt")):
        raise ValueError(f"{data}: not a fairseq data-bin (no {', '.join(missing) or 'dict.*.txt'})")
    return data


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
    cpu_workers: int = 0  # > 0: CPU data-parallel processes (gloo) instead of GPUs, per node
    precision: str = None  # default: the recipe's
    seed: int = None  # default: the recipe's
    slurm: bool = False  # one SLURM task per worker, started by srun / submitit on each node
    master_port: int = 29500  # torchrun's (under SLURM: runs.slurm.rendezvous)
    train_entry: str = None  # default: fairseq-train of this environment
    extra: list = field(default_factory=list)

    @property
    def workers(self):
        return (self.cpu_workers or self.gpus) * self.nodes

    @property
    def launcher(self):
        """What starts one process per worker: "slurm", "torchrun" (CPU workers here), or None
        (one process; fairseq spawns a process per GPU of a node itself)."""
        if self.slurm and self.workers > 1:
            return "slurm"
        if self.nodes > 1:
            raise ValueError("multi-node training runs under SLURM (fairseq-ln-submit)")
        return "torchrun" if self.cpu_workers > 1 else None

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
        if self.launcher:  # a process per worker, each adding its rank (RANK_FLAGS)
            distributed.update(
                distributed_world_size=self.workers,
                distributed_init_method="env://",  # MASTER_ADDR / MASTER_PORT of torchrun or the SLURM job
                distributed_no_spawn=True,
            )
            if self.cpu_workers:  # docs/fairseq_notes.md: CPU data parallel
                distributed.update(distributed_backend="gloo", ddp_backend="legacy_ddp")
        elif not self.cpu_workers:  # the GPUs asked for; fairseq's default is every GPU it sees
            distributed.update(distributed_world_size=self.gpus)
        return fairseq

    def write_hydra_config(self, path):
        """The same run as a config for ``fairseq-hydra-train --config-dir DIR --config-name NAME``
        (one process per launch; multi-GPU via ``distributed_training`` as usual)."""
        import yaml

        if self.cpu_workers > 1:
            raise ValueError(
                f"--cpu-workers {self.cpu_workers}: a fairseq-hydra-train config is one process; "
                "CPU data parallel runs through torchrun (fairseq-ln-train without --hydra-config)"
            )
        return write_text(path, f"# {self.describe()}\n" + yaml.safe_dump(self.groups(), sort_keys=False))

    def fairseq_args(self):
        """The arguments after ``fairseq-train``."""
        return fairseq_flags(self.groups()) + list(self.extra)

    def command(self):
        """The full command line (a list). One process per worker: under SLURM every task runs
        it (each ``fairseq-train`` with its rank from ``SLURM_PROCID``); CPU workers here:
        torchrun starts ``cpu_workers`` processes (rank from torchrun's ``RANK``)."""
        entry = self.train_entry or str(BIN / "fairseq-train")
        command = [entry, *self.fairseq_args()]
        if self.launcher == "slurm":
            return ["bash", "-c", RANK_FLAGS["slurm"], "fairseq-train-rank", *command]
        if self.launcher == "torchrun":
            return [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc_per_node",
                str(self.cpu_workers),
                "--master_port",
                str(self.master_port),
                "--no-python",
                "bash",
                "-c",
                RANK_FLAGS["torchrun"],
                "fairseq-train-rank",  # $0 of that script
                *command,
            ]
        return command

    def describe(self):
        max_tokens, update_freq = self.plan()
        return (
            f"{self.recipe.name}: {self.workers} {'CPU process' if self.cpu_workers else 'GPU'}(s) x {max_tokens} tokens x "
            f"update-freq {update_freq} = {self.workers * max_tokens * update_freq} tokens/update "
            f"(recipe: {self.recipe.tokens_per_update}), {self.effective_precision}"
        )

    def record(self, run_dir=None):
        """What evaluation and tables need to know about this run (written as run.json). The
        save dir is recorded relative to ``run_dir`` when inside it, so that a run copied or
        moved elsewhere is evaluated on its own checkpoints (:func:`run_save_dir`)."""
        recipe = self.recipe
        return {
            "recipe": recipe.name.split("@")[0],
            "depth": recipe.data.get("depth"),
            "data": str(self.data),
            "save_dir": relative_save_dir(self.save_dir, run_dir),
            "workers": self.workers,
            "cpu": bool(self.cpu_workers),
            "precision": self.effective_precision,
            "plan": dict(zip(("max_tokens", "update_freq"), self.plan())),
            "generate": recipe.data.get("generate", {}),
            "paper": recipe.data.get("paper"),
            "task": recipe.fairseq["task"]["_name"],
            "source_lang": recipe.fairseq["task"].get("source_lang"),  # None for a language model
            "target_lang": recipe.fairseq["task"].get("target_lang"),
            "config_yaml": recipe.fairseq["task"].get("config_yaml"),  # speech: what decoding reads
            "command": shlex.join(self.command()),
        }


def relative_save_dir(save_dir, run_dir=None):
    """``save_dir`` relative to ``run_dir`` ("checkpoints") when inside it, else as given."""
    if run_dir is not None:
        try:
            return str(Path(save_dir).resolve().relative_to(Path(run_dir).resolve()))
        except ValueError:  # elsewhere: kept as given
            pass
    return str(save_dir)


def run_save_dir(run_dir, run):
    """The checkpoints of the run in ``run_dir`` (its run.json: ``run``): its recorded save dir
    taken inside ``run_dir`` when relative; an absolute one (a run.json written before save
    dirs were recorded relative) gives way to the folder of the same name inside ``run_dir``,
    so that a copied or moved run is scored on its own checkpoints, never its original's."""
    run_dir, recorded = Path(run_dir), Path(run["save_dir"])
    if not recorded.is_absolute():
        return run_dir / recorded
    inside = run_dir / recorded.name
    return inside if inside.is_dir() else recorded


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
    write_json(run_dir / "run.json", launch.record(run_dir))


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
            "Loaded checkpoint",
            "done training",
        )
    )


def train(launch, run_dir, env=None):
    """Write ``run_dir/run.json`` and run the training, logging to ``run_dir/train.log``
    (each task of a multi-process job: see :func:`write_record`, :func:`train_log`). Raises
    RuntimeError when the training fails, or (rank 0) when it exits without fairseq's "done
    training": a run that did not reach its end is never scored as if it had."""
    run_dir = Path(run_dir)
    write_record(run_dir, launch)
    print(launch.describe(), flush=True)
    if (Path(launch.save_dir) / "checkpoint_last.pt").exists():
        print(f"resuming from {Path(launch.save_dir) / 'checkpoint_last.pt'}", flush=True)
    log = train_log(run_dir)
    start = log.stat().st_size if log.exists() else 0
    run_logged(launch.command(), log, launch.recipe.name, is_progress, env)
    with open(log, "rb") as f:  # this attempt's lines only (a resumed run's log holds the earlier ones)
        f.seek(start)
        done = b"done training" in f.read()
    if process_rank() == 0 and not done:
        raise RuntimeError(f"[{launch.recipe.name}] exited 0 without fairseq's 'done training'; see {log}")
    return run_dir
