#!/usr/bin/env python
"""Evaluate training runs (see fairseq_layernorm_plugins/recipes/evaluate.py):

    python scripts/evaluate.py runs/iwslt14/admin/6L-6L.seed1 [more run dirs]

averages the run's last N checkpoints (the recipe's average_last, or --average-last),
runs fairseq-generate with the recipe's beam and length penalty, detokenises, and writes
results.json with SacreBLEU (and its signature), tokenized and compound-split BLEU.
"""

import argparse
import sys

from fairseq_layernorm_plugins.recipes.evaluate import evaluate


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dirs", nargs="+", help="run directories (with run.json), as written by scripts/train.py")
    parser.add_argument("--average-last", type=int, help="checkpoints to average (default: the recipe's)")
    parser.add_argument(
        "--checkpoints", choices=("epoch", "update"), default="epoch", help="average epoch or update checkpoints"
    )
    parser.add_argument("--subset", default="test", help="default: test")
    parser.add_argument("--max-tokens", type=int, default=8000)
    args = parser.parse_args(argv)
    for run_dir in args.run_dirs:
        try:
            evaluate(run_dir, args.average_last, args.checkpoints, args.subset, args.max_tokens)
        except (OSError, ValueError, RuntimeError) as err:
            sys.exit(f"error: {run_dir}: {err}")


if __name__ == "__main__":
    main()
