#!/usr/bin/env python
"""A SLURM cluster on this machine for trying ``fairseq-ln-submit`` (fairseq_layernorm_plugins/
runs/local_slurm.py; needs root and Debian's slurmctld slurmd slurm-client munge):

    python scripts/local_slurm.py start /tmp/slurm --nodes 2 --gpus 1
    source /tmp/slurm/env.sh      # SLURM_CONF: sinfo, sbatch, squeue and submitit find it
    python scripts/local_slurm.py stop /tmp/slurm
"""

import argparse
import sys

from fairseq_layernorm_plugins.runs.local_slurm import LocalCluster, missing_commands

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("folder", help="where its configuration, state and logs go (a short path)")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=0, help="fake GPUs per node (GRES; no device behind them)")
    args = parser.parse_args()
    if args.action == "start" and missing_commands():
        sys.exit(
            f"error: not installed: {', '.join(missing_commands())} (apt-get install slurmctld slurmd slurm-client munge)"
        )
    try:
        cluster = LocalCluster(args.folder, args.nodes, args.gpus)
        if args.action == "start":
            cluster.start()
            print(f"{args.nodes} node(s) idle; source {cluster.dir / 'env.sh'}")
        else:
            cluster.stop()
    except (ValueError, RuntimeError) as err:
        sys.exit(f"error: {err}")
