#!/usr/bin/env python
"""Train a recipe: ``configs/<recipe>.yaml`` + data + machines -> fairseq-train.

    python scripts/train.py iwslt14/admin --gpus 1
    python scripts/train.py wmt14/admin/admin --depth 18L-18L --gpus 8 --precision bf16
    python scripts/train.py iwslt14_mini/preln --cpu-workers 2          # CPU data parallel (gloo)
    python scripts/train.py iwslt14/preln --dry-run -- --max-epoch 5    # print the command only
    python scripts/train.py iwslt14/admin --hydra-config hydra/admin.yaml  # for fairseq-hydra-train

Keeps the recipe's tokens per update for any number of GPUs (max-tokens x update-freq),
prints the exact fairseq command, writes runs/<recipe>/<depth>.seed<S>/{run.json,train.log}
and resumes from that run's checkpoint_last.pt. Multi-node runs go through
scripts/submit.py (SLURM). Arguments after ``--`` go to fairseq-train unchanged.
"""

import argparse
import shlex
import sys
from pathlib import Path

from fairseq_layernorm_plugins.recipes.config import RecipeError, list_recipes, load_recipe
from fairseq_layernorm_plugins.recipes.launch import PRECISIONS, Launch, data_bin, run_dir, train

REPO = Path(__file__).resolve().parents[1]


def add_launch_args(parser):
    parser.add_argument("--depth", help="e.g. 18L-18L (default: the recipe's first)")
    parser.add_argument(
        "--data", help="prepared data directory or data-bin (default: the recipe's data, under the repo)"
    )
    parser.add_argument("--gpus", type=int, default=1, help="GPUs per node (default: 1)")
    parser.add_argument(
        "--cpu-workers", type=int, default=0, help="train on CPU with N data-parallel processes (gloo) instead"
    )
    parser.add_argument("--precision", choices=PRECISIONS, help="default: the recipe's (fp32 on CPU)")
    parser.add_argument("--seed", type=int, default=1, help="default: 1")
    parser.add_argument("--runs", default=str(REPO / "runs"), help="where runs go (default: runs/)")
    parser.add_argument("--master-port", type=int, default=29500)


def make_launch(args, recipe_name, extra=(), nodes=1):
    recipe = load_recipe(recipe_name).with_depth(args.depth)
    run = run_dir(args.runs, recipe, args.seed)
    launch = Launch(
        recipe,
        str(data_bin(args.data, recipe, REPO)),
        str(run / "checkpoints"),
        gpus=args.gpus,
        nodes=nodes,
        cpu_workers=args.cpu_workers,
        precision=args.precision,
        seed=args.seed,
        master_port=args.master_port,
        extra=list(extra),
    )
    return launch, run


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="recipes: " + ", ".join(list_recipes()),
    )
    parser.add_argument("recipe", help="a recipe name (e.g. iwslt14/admin) or a YAML path")
    add_launch_args(parser)
    parser.add_argument("--dry-run", action="store_true", help="print the command and exit")
    parser.add_argument(
        "--hydra-config",
        metavar="FILE.yaml",
        help="write the run as a fairseq-hydra-train config instead of training "
        "(then: fairseq-hydra-train --config-dir DIR --config-name FILE)",
    )
    args = parser.parse_args(argv)
    try:
        launch, run = make_launch(args, args.recipe, extra)
    except (RecipeError, ValueError) as err:
        parser.exit(2, f"error: {err}\n")
    if args.hydra_config:
        path = launch.write_hydra_config(args.hydra_config)
        print(f"fairseq-hydra-train --config-dir {path.parent.resolve()} --config-name {path.stem}")
        return launch
    if args.dry_run:
        print(launch.describe())
        print(shlex.join(launch.command()))
        return launch
    try:
        train(launch, run)
    except RuntimeError as err:
        sys.exit(str(err))
    return launch


if __name__ == "__main__":
    main()
