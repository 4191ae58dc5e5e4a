#!/usr/bin/env python
"""The README's main job: a small real experiment on CPU, end to end, through the same
tools as a full reproduction (recipes, launcher, evaluation, table):

1. builds IWSLT14-mini from ../shared/data/iwslt14 (or --iwslt-dir);
2. trains every method briefly from its recipe ``configs/iwslt14_mini/<method>.yaml``
   (each paper's IWSLT14 recipe scaled to 2 CPU cores: d 128, 2L-2L), via
   ``scripts/train.py``'s launcher: ``fairseq-train --user-dir fairseq_layernorm_plugins``;
3. evaluates each run (``fairseq-generate``, tokenised BLEU, the IWSLT14 convention, and
   lowercased detokenised SacreBLEU with its signature);
4. writes the table (Markdown + CSV) and a loss-curve plot: ``<runs>/report.{md,csv,png}``.

Prints every command it runs; full logs go to ``<runs>/iwslt14_mini/<method>/...``.
"""
import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
METHODS = ("postln", "preln", "admin", "tfixup", "b2t", "deepnet")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iwslt-dir", default=str(REPO.parent / "shared" / "data" / "iwslt14"),
                        help="the shared IWSLT14 folder (default: ../shared/data/iwslt14)")
    parser.add_argument("--data", default=str(REPO / "data" / "iwslt14-mini"), help="where IWSLT14-mini is built")
    parser.add_argument("--runs", default=str(REPO / "runs" / "main-job"), help="runs, logs, results, report")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, from {', '.join(METHODS)}")
    parser.add_argument("--max-update", type=int, default=200, help="updates per method (default 200)")
    parser.add_argument("--test-lines", type=int, default=500, help="evenly spaced test lines (0 = all 6750)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    methods = args.methods.split(",")
    if set(methods) - set(METHODS):
        parser.error(f"unknown method(s) {sorted(set(methods) - set(METHODS))}; choose from {', '.join(METHODS)}")

    from fairseq_layernorm_plugins.prepare.iwslt14_mini import prepare
    from fairseq_layernorm_plugins.prepare.textio import DataError
    from fairseq_layernorm_plugins.recipes.config import load_recipe
    from fairseq_layernorm_plugins.recipes.evaluate import evaluate
    from fairseq_layernorm_plugins.recipes.launch import Launch, data_bin, run_dir, train
    from fairseq_layernorm_plugins.recipes.report import main as make_table

    start = time.time()
    try:
        sizes = prepare(args.iwslt_dir, args.data, test_lines=args.test_lines or None)["sizes"]
    except DataError as err:
        sys.exit(f"error: {err}")
    print(f"IWSLT14-mini ({args.data}): " + ", ".join(f"{k} {v}" for k, v in sizes.items()), flush=True)
    validate_every = max(1, args.max_update // 4)
    for method in methods:
        recipe = load_recipe(f"iwslt14_mini/{method}").with_depth()
        run = run_dir(args.runs, recipe, args.seed)
        launch = Launch(recipe, str(data_bin(args.data, recipe, REPO)), str(run / "checkpoints"), cpu_workers=1, seed=args.seed,
                        extra=["--max-update", str(args.max_update), "--validate-interval-updates", str(validate_every),
                               "--no-progress-bar"])
        t0 = time.time()
        train(launch, run)
        evaluate(run)
        print(f"[{method}] done in {(time.time() - t0) / 60:.1f} min", flush=True)
    make_table([args.runs, "--table", "iwslt14_mini", "--out", str(Path(args.runs) / "report")])
    print(f"(total {(time.time() - start) / 60:.1f} min)")


if __name__ == "__main__":
    main()
