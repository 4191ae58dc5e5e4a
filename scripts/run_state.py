#!/usr/bin/env python
"""Carry runs that are still training to another machine (a cluster node's scratch space that
does not outlive the job, say): their resumable state into a folder that lasts, and back.

    python scripts/run_state.py save --to /lasting/admin-converged \\
        runs/claims/admin-seed2/admin_radam runs/claims/admin-seed2/preln_radam
    python scripts/run_state.py restore /lasting/admin-converged   # on the next machine
    python scripts/claims.py admin --seed 2 ...                     # resumes both

Each run is saved at its path relative to ``--root`` (default runs/claims) and restored to the
same path under it, from the saved folder or any folder in it; a run that trained as far on
this machine is left as it is, and no run may be training where one is restored. A folder that
cannot be saved is named and the others are saved (the exit status is then 1). What is
carried: fairseq_layernorm_plugins/runs/run_state.py; ``--numbered`` adds the update
checkpoints that the mean of a run's last checkpoints is made of.
"""

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("save", "restore"))
    parser.add_argument("paths", nargs="+", type=Path, help="save: run directories; restore: the saved folder")
    parser.add_argument("--to", type=Path, help="save: the folder to save into")
    parser.add_argument("--root", type=Path, default=REPO / "runs" / "claims", help="where runs live")
    parser.add_argument("--numbered", action="store_true", help="save: the update checkpoints too (model only)")
    args = parser.parse_args(argv)
    from fairseq_layernorm_plugins.runs import run_state

    try:
        if args.command == "save":
            if args.to is None:
                parser.error("save needs --to FOLDER")
            run_state.save(args.paths, args.root, args.to, numbered=args.numbered)
        else:
            if len(args.paths) != 1:
                parser.error("restore takes one saved folder")
            run_state.restore(args.paths[0], args.root)
    except ValueError as err:
        sys.exit(f"run_state.py: {err}")


if __name__ == "__main__":
    main()
