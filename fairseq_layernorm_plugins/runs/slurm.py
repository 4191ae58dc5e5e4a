"""Submit a grid of runs (recipes x depths x seeds) as SLURM jobs with submitit, one job
per run: ``gpus`` tasks per node (one per GPU, fairseq's SLURM distributed setup),
training then evaluation on rank 0, requeued on preemption or timeout (training resumes
from ``checkpoint_last.pt``). ``write_sbatch`` writes the equivalent sbatch scripts for
clusters where submitit is not wanted.
"""

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from fairseq_layernorm_plugins.atomic import write_text
from fairseq_layernorm_plugins.recipes.config import CONFIG_DIR, load_recipe
from fairseq_layernorm_plugins.runs.evaluate import evaluate
from fairseq_layernorm_plugins.runs.launch import Launch, data_bin, run_dir, train


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

    def launch(self, slurm=False):
        recipe = load_recipe(self.recipe, Path(self.config_dir)).with_depth(self.depth)
        return Launch(
            recipe,
            str(data_bin(self.data, recipe, Path(self.config_dir).parent).absolute()),
            str(self.run_dir(recipe) / "checkpoints"),
            gpus=self.gpus,
            nodes=self.nodes,
            cpu_workers=self.cpu_workers,
            precision=self.precision,
            seed=self.seed,
            slurm=slurm,
            master_port=self.master_port,
            extra=list(self.extra),
        )

    def run_dir(self, recipe=None):
        return run_dir(
            self.runs, recipe or load_recipe(self.recipe, Path(self.config_dir)).with_depth(self.depth), self.seed
        )

    def __call__(self):
        slurm = "SLURM_JOB_ID" in os.environ and self.gpus * self.nodes > 1
        launch = self.launch(slurm=slurm)
        run_dir = self.run_dir(launch.recipe)
        train(launch, run_dir)
        if self.evaluate and int(os.environ.get("SLURM_PROCID", 0)) == 0:
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
            tasks_per_node=max(1, run.gpus),
            cpus_per_task=cpus_per_task,
        )
        if cluster != "local":
            params.update(gpus_per_node=run.gpus, slurm_signal_delay_s=120)
            params.update(
                {k: v for k, v in dict(slurm_partition=partition, mem_gb=mem_gb, slurm_account=account).items() if v}
            )
        else:
            params["tasks_per_node"] = 1
        executor.update_parameters(**params)
        jobs.append(executor.submit(run))
    return jobs


def write_sbatch(run, directory, timeout_min=4320, partition=None, cpus_per_task=8, mem_gb=None, account=None):
    """An sbatch script equivalent to submitting ``run``: one task per GPU on each node;
    on SIGUSR1 (120 s before the time limit, or preemption) the job is requeued and the
    script exits; evaluation runs only when training exited 0 (it reached the recipe's end)."""
    launch = run.launch(slurm=True)
    run_dir = run.run_dir(launch.recipe)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    name = f"{run.recipe}-{run.depth}-s{run.seed}".replace("/", ".")
    hours, minutes = divmod(timeout_min, 60)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={run.nodes}",
        f"#SBATCH --ntasks-per-node={run.gpus}",
        f"#SBATCH --gpus-per-node={run.gpus}",
        f"#SBATCH --cpus-per-task={cpus_per_task}",
        f"#SBATCH --time={hours:02d}:{minutes:02d}:00",
        "#SBATCH --requeue",
        "#SBATCH --signal=B:USR1@120",
        f"#SBATCH --output={run_dir}/slurm-%j.out",
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
        f"srun --label {shlex.join(launch.command())} >> {shlex.quote(str(run_dir / 'train.log'))} 2>&1 &",
        "wait $!  # returns early when USR1 arrives; the trap then requeues and exits",
        "status=$?",
        '[ "$status" -eq 0 ] || { echo "training exited with status $status: not evaluating" >&2; exit "$status"; }',
        "# training ended by itself: evaluate",
        f"python {shlex.quote(str(Path(run.config_dir).parent / 'scripts' / 'evaluate.py'))} {shlex.quote(str(run_dir))}",
        "",
    ]
    return write_text(directory / f"{name}.sbatch", "\n".join(lines))
