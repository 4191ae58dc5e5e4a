#!/usr/bin/env python
"""The README's main job: every method trained until it translates, on CPU, end to end
through the same tools as a full reproduction (data recipe, recipes, launcher,
evaluation, table, plot):

1. prepares the corpus: Multi30k De-En by default (``prepare/multi30k.py``: raw files
   from ../shared/data/multi30k/task1_raw when present, else downloaded from the
   official repository and checked against their sha256), or ``--corpus iwslt14-mini``;
2. trains each method from its recipe (``configs/<corpus>/<method>.yaml``: the paper's
   IWSLT14 recipe scaled to a d=128, 2L-2L model) within a time budget per method
   (fairseq's ``--stop-time-hours``; ``--max-update`` bounds it too), ``--jobs`` at once;
3. evaluates each run on the full test set (``fairseq-generate``, beam 5; detokenised,
   cased SacreBLEU with its signature for Multi30k);
4. writes ``<runs>/report.{md,csv,png}``: per method its BLEU, updates and training
   time beside the Post-LN run of the same job, and the loss curves.

Resumable: a method with results is not run again (``--force`` reruns), an interrupted
training resumes from its last checkpoint within what is left of its budget.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from fairseq_layernorm_plugins.recipes import experiment
from fairseq_layernorm_plugins.recipes.experiment import REPO, SHARED

# corpus: (recipe directory, default data directory, minutes per method, updates per method)
CORPORA = {
    "multi30k": ("multi30k", REPO / "data" / "multi30k.de-en", 8.0, 0),
    "iwslt14-mini": ("iwslt14_mini", REPO / "data" / "iwslt14-mini", 0.0, 200),
}


def run_method(method, args):
    """Train (or resume) and evaluate one method; returns its results.json content."""
    from fairseq_layernorm_plugins.recipes.config import load_recipe
    from fairseq_layernorm_plugins.recipes.evaluate import evaluate
    from fairseq_layernorm_plugins.recipes.launch import run_dir

    recipe = load_recipe(f"{CORPORA[args.corpus][0]}/{method}").with_depth()
    run = run_dir(args.runs, recipe, args.seed)
    if (run / "results.json").is_file() and not args.force:
        print(f"[{method}] already evaluated: {run / 'results.json'}", flush=True)
        return json.loads((run / "results.json").read_text())
    extra = ["--no-progress-bar", "--validate-interval-updates", str(args.validate_every)]
    if args.minutes:
        extra += ["--stop-time-hours", f"{args.minutes / 60:.6f}"]
    if args.max_update:
        extra += ["--max-update", str(args.max_update)]
    start = time.time()
    error = experiment.run_training(recipe, run, args.data, args.seed, extra)
    if error:  # e.g. a diverged run: fairseq stops on NaN/inf; the other methods go on
        print(f"[{method}] training failed: {error}", flush=True)
        return {"error": error.splitlines()[0]}
    result = evaluate(run)
    print(f"[{method}] done in {(time.time() - start) / 60:.1f} min", flush=True)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="multi30k", help="default: multi30k")
    parser.add_argument(
        "--raw-dir",
        help="Multi30k: folder with the raw .gz files "
        "(default: ../shared/data/multi30k/task1_raw if present, else download)",
    )
    parser.add_argument(
        "--download-dir",
        default=str(REPO / "data" / "downloads"),
        help="Multi30k download cache (default: data/downloads)",
    )
    parser.add_argument("--url", help="Multi30k: download URL template with {name} (default: the official repository)")
    parser.add_argument(
        "--iwslt-dir",
        default=str(SHARED / "iwslt14"),
        help="IWSLT14-mini: the shared IWSLT14 folder (default: ../shared/data/iwslt14)",
    )
    parser.add_argument(
        "--data", help="where the corpus is prepared (default: data/multi30k.de-en or data/iwslt14-mini)"
    )
    parser.add_argument(
        "--runs", default=str(REPO / "runs" / "main-job"), help="runs, logs, results, report (default: runs/main-job)"
    )
    parser.add_argument(
        "--methods", help="comma-separated (default: every registered method with a recipe for the corpus)"
    )
    parser.add_argument(
        "--minutes",
        type=float,
        help="training minutes per method (fairseq --stop-time-hours; 0 = none; "
        "default: 8 for multi30k, none for iwslt14-mini)",
    )
    parser.add_argument(
        "--max-update", type=int, help="updates per method (0 = none; default: none for multi30k, 200 for iwslt14-mini)"
    )
    parser.add_argument(
        "--validate-every", type=int, default=100, help="validate every N updates, for the curves (default 100)"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        help="methods trained at once, each with cores / JOBS threads (default: one per core, at most one per method)",
    )
    parser.add_argument(
        "--test-lines", type=int, default=0, help="evaluate on N evenly spaced test lines (default 0: all)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--force", action="store_true", help="retrain and re-evaluate methods that already have results"
    )
    args = parser.parse_args(argv)
    from fairseq_layernorm_plugins.methods import method_names

    known = method_names(CORPORA[args.corpus][0])
    methods = args.methods.split(",") if args.methods else known
    if set(methods) - set(known):
        parser.error(f"unknown method(s) {sorted(set(methods) - set(known))}; choose from {', '.join(known)}")
    _, default_data, default_minutes, default_updates = CORPORA[args.corpus]
    args.data = args.data or str(default_data)
    args.minutes = default_minutes if args.minutes is None else args.minutes
    args.max_update = default_updates if args.max_update is None else args.max_update
    args.jobs = args.jobs or max(1, min(len(methods), os.cpu_count() or 1))

    from fairseq_layernorm_plugins.recipes.report import baseline_report

    start = time.time()
    stamp = experiment.prepare_corpus(
        args.corpus, args.data, args.test_lines, args.raw_dir, args.download_dir, args.url, args.iwslt_dir
    )
    print(f"{args.corpus} ({args.data}): " + ", ".join(f"{k} {v}" for k, v in stamp["sizes"].items()), flush=True)
    budget = " and ".join(
        filter(
            None,
            [f"{args.minutes:g} min" if args.minutes else "", f"{args.max_update} updates" if args.max_update else ""],
        )
    )
    print(
        f"training {len(methods)} method(s), {args.jobs} at once, each for at most {budget or 'its recipe'}", flush=True
    )
    results = dict(experiment.parallel(lambda method: run_method(method, args), methods, args.jobs))
    out = Path(args.runs) / "report"
    failed = [f"{m}: training failed ({results[m]['error']})" for m in methods if "error" in results[m]]
    done = [results[m]["run_dir"] for m in methods if "error" not in results[m]]
    if not done:
        sys.exit("error: every method failed; see the train.log files under " + args.runs)
    markdown = baseline_report(done, out, title=f"{args.corpus}, {budget or 'recipe budget'} per method", notes=failed)
    print(markdown)
    print(f"wrote {out}.md, {out}.csv, {out}.png (total {(time.time() - start) / 60:.1f} min)")


if __name__ == "__main__":
    main()
