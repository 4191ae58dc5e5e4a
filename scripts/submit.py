#!/usr/bin/env python
"""Submit a grid of runs (recipes x depths x seeds) to SLURM with submitit, one job per
run, each training and then evaluating (see fairseq_layernorm_plugins/recipes/slurm.py):

    python scripts/submit.py wmt14/admin/postln wmt14/admin/preln wmt14/admin/admin \\
        --depths 6L-6L 12L-12L 18L-18L --seeds 1 2 3 --gpus 4 --partition gpu
    python scripts/submit.py ... --dry-run            # write the sbatch scripts only
    python scripts/submit.py iwslt14_mini/preln --cluster local --cpu-workers 1   # run locally
"""

import argparse
from pathlib import Path

from fairseq_layernorm_plugins.recipes.launch import PRECISIONS
from fairseq_layernorm_plugins.recipes.slurm import grid, submit, write_sbatch

REPO = Path(__file__).resolve().parents[1]


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("recipes", nargs="+", help="recipe names, e.g. wmt14/admin/admin")
    parser.add_argument("--depths", nargs="+", help="default: each recipe's depths")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1])
    parser.add_argument("--data", help="data directory (default: each recipe's)")
    parser.add_argument("--runs", default=str(REPO / "runs"))
    parser.add_argument("--gpus", type=int, default=8, help="GPUs (= tasks) per node (default: 8)")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--cpu-workers", type=int, default=0, help="CPU processes instead of GPUs (local runs)")
    parser.add_argument("--precision", choices=PRECISIONS)
    parser.add_argument("--partition")
    parser.add_argument("--account")
    parser.add_argument("--timeout-min", type=int, default=4320, help="per job, before requeue (default: 3 days)")
    parser.add_argument("--cpus-per-task", type=int, default=8)
    parser.add_argument("--mem-gb", type=int)
    parser.add_argument("--cluster", choices=("slurm", "local"), help="default: SLURM if available")
    parser.add_argument(
        "--dry-run", action="store_true", help="write equivalent sbatch scripts to RUNS/sbatch/ and stop"
    )
    args = parser.parse_args(argv)
    runs = grid(
        args.recipes,
        args.depths,
        args.seeds,
        data=args.data,
        runs=args.runs,
        gpus=0 if args.cpu_workers else args.gpus,
        nodes=args.nodes,
        cpu_workers=args.cpu_workers,
        precision=args.precision,
    )
    resources = dict(
        timeout_min=args.timeout_min,
        partition=args.partition,
        cpus_per_task=args.cpus_per_task,
        mem_gb=args.mem_gb,
        account=args.account,
    )
    if args.dry_run:
        for run in runs:
            print(write_sbatch(run, Path(args.runs) / "sbatch", **resources))
        return runs
    jobs = submit(runs, Path(args.runs) / "submitit", cluster=args.cluster, **resources)
    for run, job in zip(runs, jobs):
        print(f"{job.job_id}\t{run.recipe} {run.depth} seed {run.seed}\t{run.run_dir()}")
    return jobs


if __name__ == "__main__":
    main()
