"""Submit a grid of runs (recipes x depths x seeds) as SLURM jobs with submitit, one job
per run: a task per worker on each node (``gpus`` GPUs, or ``cpu_workers`` CPU processes),
every task one ``fairseq-train`` process of the run (``Launch.command``: rank and device from
SLURM's variables, rendezvous at the job's first node), then evaluation on rank 0 once the
training has ended by itself. A job is requeued on preemption or timeout and its training
resumes from ``checkpoint_last.pt``; a finished run requeued ends at once
(``_compat.resume_finished``). ``write_sbatch`` writes the equivalent sbatch scripts for
clusters where submitit is not wanted; ``runs.local_slurm`` starts a SLURM on this machine to
try both on.
"""

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from fairseq_layernorm_plugins.atomic import write_text
from fairseq_layernorm_plugins.recipes.config import CONFIG_DIR, load_recipe
from fairseq_layernorm_plugins.runs.evaluate import evaluate
from fairseq_layernorm_plugins.runs.launch import BIN, Launch, data_bin, process_rank, run_dir, train

# the port the tasks of a job meet on, from its job id (jobs sharing a node do not collide)
PORT_OF_JOB = "20000 + SLURM_JOB_ID % 20000"
# the same in the sbatch script: MASTER_ADDR / MASTER_PORT for every task (srun passes them on)
RENDEZVOUS_SH = f"""\
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MASTER_ADDR=$(scontrol show node "$first" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
export MASTER_ADDR MASTER_PORT=$(({PORT_OF_JOB}))"""


def rendezvous(environ=os.environ):
    """MASTER_ADDR / MASTER_PORT for the tasks of the SLURM job this process runs in: the
    address of the job's first node (scontrol's ``NodeAddr``, the node's name unless the
    cluster says otherwise) and :data:`PORT_OF_JOB`."""

    def scontrol(*args):
        return subprocess.run(["scontrol", *args], check=True, capture_output=True, text=True).stdout

    first = scontrol("show", "hostnames", environ["SLURM_JOB_NODELIST"]).split()[0]
    address = re.search(r"NodeAddr=(\S+)", scontrol("show", "node", first)).group(1)
    return {"MASTER_ADDR": address, "MASTER_PORT": str(20000 + int(environ["SLURM_JOB_ID"]) % 20000)}


@dataclass
class GridRun:
    """One run of the grid; callable as a submitit job, and requeued by submitit on
    preemption through :meth:`checkpoint`."""

    recipe: str
    depth: str
    seed: int
    data: str
    runs: str
    gpus: int = 1
    nodes: int = 1
    cpu_workers: int = 0
    precision: str = None
    master_port: int = 29500
    config_dir: str = str(CONFIG_DIR)
    extra: list = field(default_factory=list)
    evaluate: bool = True
    train_entry: str = None  # default: fairseq-train of this environment

    def launch(self, slurm=False):
        recipe = load_recipe(self.recipe, Path(self.config_dir)).with_depth(self.depth)
        return Launch(
            recipe,
            str(data_bin(self.data, recipe, Path(self.config_dir).parent).absolute()),
            str((self.run_dir(recipe) / "checkpoints").absolute()),
            gpus=self.gpus,
            nodes=self.nodes,
            cpu_workers=self.cpu_workers,
            precision=self.precision,
            seed=self.seed,
            slurm=slurm,
            master_port=self.master_port,
            train_entry=self.train_entry,
            extra=list(self.extra),
        )

    def run_dir(self, recipe=None):
        return run_dir(
            self.runs, recipe or load_recipe(self.recipe, Path(self.config_dir)).with_depth(self.depth), self.seed
        )

    def __call__(self):
        """Run as every task of the job: train (this task's process), then evaluate on
        rank 0. A training that fails raises here, so nothing is evaluated and the job fails."""
        launch = self.launch(slurm="SLURM_JOB_ID" in os.environ)
        env = {**os.environ, **rendezvous()} if launch.launcher == "slurm" else None
        run_dir = self.run_dir(launch.recipe)
        train(launch, run_dir, env)
        if self.evaluate and process_rank() == 0:
            return evaluate(run_dir)
        return None

    def checkpoint(self, *args, **kwargs):
        import submitit

        return submitit.helpers.DelayedSubmission(self)  # requeue; fairseq resumes from checkpoint_last.pt


def grid(recipes, depths, seeds, **common):
    """Every (recipe, depth, seed) as a GridRun; ``depths`` None means each recipe's own. A
    recipe that does not load or lacks a depth is a RecipeError (naming its file) here, before
    anything is written or submitted."""
    runs = []
    for name in recipes:
        recipe = load_recipe(name, Path(common.get("config_dir", CONFIG_DIR)))
        for depth in depths or recipe.depths or [None]:
            recipe.with_depth(depth)
            runs += [GridRun(name, depth, seed, **common) for seed in seeds]
    return runs


def submit(runs, folder, cluster=None, timeout_min=4320, partition=None, cpus_per_task=8, mem_gb=None, account=None):
    """Submit ``runs`` with submitit (``cluster="local"`` runs them as local processes);
    returns the jobs."""
    import submitit

    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    jobs = []
    for run in runs:
        params = dict(
            name=f"{run.recipe}-{run.depth}-s{run.seed}".replace("/", "."),
            timeout_min=timeout_min,
            nodes=run.nodes,
            tasks_per_node=run.cpu_workers or run.gpus,
            cpus_per_task=cpus_per_task,
        )
        if cluster != "local":
            params.update(slurm_signal_delay_s=120, **{"gpus_per_node": run.gpus} if run.gpus else {})
            params.update(
                {k: v for k, v in dict(slurm_partition=partition, mem_gb=mem_gb, slurm_account=account).items() if v}
            )
        else:  # one process; CPU workers: it starts them (torchrun)
            params["tasks_per_node"] = 1
        executor.update_parameters(**params)
        jobs.append(executor.submit(run))
    return jobs


def write_sbatch(run, directory, timeout_min=4320, partition=None, cpus_per_task=8, mem_gb=None, account=None):
    """An sbatch script equivalent to submitting ``run``: a task per worker on each node; on
    SIGUSR1 (120 s before the time limit, or preemption) the job is requeued and the script
    exits; evaluation runs only when every task's training exited 0 (it reached the recipe's
    end); otherwise the job fails with the training log's tail in its output."""
    launch = run.launch(slurm=True)
    run_dir = run.run_dir(launch.recipe).absolute()
    directory = Path(directory).absolute()
    directory.mkdir(parents=True, exist_ok=True)
    name = f"{run.recipe}-{run.depth}-s{run.seed}".replace("/", ".")
    hours, minutes = divmod(timeout_min, 60)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={run.nodes}",
        f"#SBATCH --ntasks-per-node={run.cpu_workers or run.gpus}",
        *[f"#SBATCH --gpus-per-node={run.gpus}"] * bool(run.gpus),
        f"#SBATCH --cpus-per-task={cpus_per_task}",
        f"#SBATCH --time={hours:02d}:{minutes:02d}:00",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",  # a requeued job's output follows the earlier attempts'
        "#SBATCH --signal=B:USR1@120",
        f"#SBATCH --output={directory}/{name}-%j.out",  # a folder that exists when the job starts
    ]
    lines += [f"#SBATCH --partition={partition}"] * bool(partition) + [f"#SBATCH --mem={mem_gb}G"] * bool(mem_gb)
    lines += [f"#SBATCH --account={account}"] * bool(account)
    lines += [
        "",
        f"# {launch.describe()}",
        "# on preemption or timeout (USR1): requeue and stop here; fairseq resumes from checkpoint_last.pt",
        "trap 'scontrol requeue \"$SLURM_JOB_ID\"; exit 0' USR1",
        f"mkdir -p {shlex.quote(str(run_dir))}",
        f"cat > {shlex.quote(str(run_dir / 'run.json'))} <<'JSON'",
        json.dumps(launch.record(run_dir), indent=1),
        "JSON",
        *[RENDEZVOUS_SH] * (launch.launcher == "slurm"),
        "# -K: one task failing ends the others",
        f"srun -K --label {shlex.join(launch.command())} >> {shlex.quote(str(run_dir / 'train.log'))} 2>&1 &",
        "wait $!  # returns early when USR1 arrives; the trap then requeues and exits",
        "status=$?",
        "if [ $status -ne 0 ]; then",
        f"    tail -n 20 {shlex.quote(str(run_dir / 'train.log'))} >&2",
        '    echo "training exited with status $status: not evaluating" >&2',
        '    exit "$status"',
        "fi",
        "# training ended by itself: evaluate",
        f"{shlex.quote(str(BIN / 'fairseq-ln-evaluate'))} {shlex.quote(str(run_dir))}",
        "",
    ]
    return write_text(directory / f"{name}.sbatch", "\n".join(lines))
