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
4. trains each method again at a depth where Post-LN fails (the depth column, 18L-18L, see
   :func:`deep_recipe`) and judges it by its final validation NLL against the unigram entropy
   of the training targets: trained, stalled or diverged;
5. writes ``<runs>/report.{md,csv,png}`` and ``report-depth.csv``: per method its BLEU,
   updates and training time beside the Post-LN run of the same job, the depth column's
   verdicts, and the loss curves of both.

Resumable: a method with results is not run again (``--force`` reruns), an interrupted
training resumes from its last checkpoint within what is left of its budget.
"""

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from fairseq_layernorm_plugins.experiments import experiment
from fairseq_layernorm_plugins.experiments.experiment import REPO, SHARED
from fairseq_layernorm_plugins.recipes import specs

# corpus: (recipe directory, default data directory, minutes per method, updates per method,
# updates per method in the depth column)
CORPORA = {
    "multi30k": ("multi30k", REPO / "data" / "multi30k.de-en", 7.0, 0, 200),
    "iwslt14-mini": ("iwslt14_mini", REPO / "data" / "iwslt14-mini", 0.0, 200, 0),
}
# The depth column: where deep Post-LN fails on Multi30k (docs/claims.md: 18L-18L, d=64, the B2T
# and T-Fixup claims), with every method's recipe under one schedule, so that no method fails for
# want of a warm-up: inverse-sqrt with DEPTH_WARMUP warm-up updates to DEPTH_LR, DEPTH_TOKENS per update.
DEPTH_WIDTH, DEPTH_LR, DEPTH_WARMUP, DEPTH_TOKENS, DEPTH_VALIDATE = 64, 1e-3, 100, 1024, 50


def run_method(method, args):
    """Train (or resume) and evaluate one method; returns its results.json content."""
    from fairseq_layernorm_plugins.recipes.config import load_recipe
    from fairseq_layernorm_plugins.runs.evaluate import evaluate
    from fairseq_layernorm_plugins.runs.launch import run_dir

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


def deep_recipe(method, args):
    """The method's recipe (its optimizer, initialisation, dropout) at ``args.depth``, width
    DEPTH_WIDTH (FFN 4 x, 4 heads) and the depth column's schedule, for ``args.depth_updates``
    updates of DEPTH_TOKENS tokens."""
    return experiment.scaled_recipe(
        f"{CORPORA[args.corpus][0]}/{method}",
        args.depth,
        experiment.model_size(DEPTH_WIDTH),
        updates=args.depth_updates,
        tokens=DEPTH_TOKENS,
        lr=[DEPTH_LR],
        log_interval=25,
        overrides={"fairseq": {"optimization": {"max_epoch": 0}}},
        schedule={"_name": "inverse_sqrt", "warmup_updates": DEPTH_WARMUP, "warmup_init_lr": 1e-7},
    )


def run_deep(method, args):
    """Train (or resume) one method's run of the depth column; returns its run directory. No
    test set: the verdict is the final validation NLL's (``report.depth_rows``)."""
    from fairseq_layernorm_plugins.runs.launch import run_dir

    recipe = deep_recipe(method, args)
    run = run_dir(args.runs, recipe, args.seed)
    spec = specs.recorded({"fairseq": recipe.fairseq, "budget": {"updates": args.depth_updates}, "seed": args.seed})
    if args.force:
        shutil.rmtree(run, ignore_errors=True)
    experiment.open_run_dir(run, spec, f"{method} {args.depth}")
    if not (run / "trained").is_file():
        start = time.time()
        extra = ["--no-progress-bar", "--validate-interval-updates", str(DEPTH_VALIDATE), "--no-epoch-checkpoints"]
        error = experiment.run_training(recipe, run, args.data, args.seed, extra)
        print(
            f"[{method} {args.depth}] {'stopped: ' + error.splitlines()[0] if error else 'done'} "
            f"in {(time.time() - start) / 60:.1f} min",
            flush=True,
        )
        (run / "trained").touch()  # a NaN/inf stop is an outcome too
    return run


def chosen_methods(methods, corpus):
    """The methods ``--methods`` names (comma-separated; "all": every method with a recipe for the
    corpus; None: the papers' six), in table order as given."""
    from fairseq_layernorm_plugins.methods import PAPER_METHODS, method_names, pick_methods

    known = method_names(CORPORA[corpus][0])
    return pick_methods(methods, known, [m for m in known if m in PAPER_METHODS])


def run_job(job, args):
    """One job of the main job: ("translate", method) or ("depth", method)."""
    kind, method = job
    return run_method(method, args) if kind == "translate" else run_deep(method, args)


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
        "--methods",
        help="comma-separated, or 'all': every registered method with a recipe for the corpus (default: the "
        "papers' six, Post-LN, Pre-LN, Admin, T-Fixup, B2T and DeepNet)",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        help="training minutes per method (fairseq --stop-time-hours; 0 = none; "
        "default: 6 for multi30k, none for iwslt14-mini)",
    )
    parser.add_argument(
        "--max-update", type=int, help="updates per method (0 = none; default: none for multi30k, 200 for iwslt14-mini)"
    )
    parser.add_argument(
        "--depth-updates",
        type=int,
        help="updates per method in the depth column (0 = no depth column; default: 200 for multi30k, 0 for "
        "iwslt14-mini)",
    )
    parser.add_argument("--depth", default="18L-18L", help="the depth column's depth (default 18L-18L)")
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
    try:
        methods = chosen_methods(args.methods, args.corpus)
    except ValueError as err:
        parser.error(str(err))
    _, default_data, default_minutes, default_updates, default_depth_updates = CORPORA[args.corpus]
    args.data = args.data or str(default_data)
    args.minutes = default_minutes if args.minutes is None else args.minutes
    args.max_update = default_updates if args.max_update is None else args.max_update
    args.depth_updates = default_depth_updates if args.depth_updates is None else args.depth_updates
    args.jobs = args.jobs or max(1, min(len(methods), os.cpu_count() or 1))

    from fairseq_layernorm_plugins.experiments import report
    from fairseq_layernorm_plugins.experiments.curves import unigram_bits

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
    if args.depth_updates:
        print(f"then each at {args.depth} (d={DEPTH_WIDTH}) for {args.depth_updates} updates: the depth column")
    jobs = [("translate", m) for m in methods] + [("depth", m) for m in methods if args.depth_updates]
    finished = dict(experiment.parallel(lambda job: run_job(job, args), jobs, args.jobs))
    results = {m: finished[("translate", m)] for m in methods}
    depth = args.depth_updates and report.DepthColumn(
        [finished[("depth", m)] for m in methods],
        unigram_bits(args.data),
        f"{args.depth}, d={DEPTH_WIDTH}: {args.depth_updates} updates of {DEPTH_TOKENS} tokens, lr {DEPTH_LR:g}, "
        f"{DEPTH_WARMUP} warm-up updates, each method's optimizer",
    )
    out = Path(args.runs) / "report"
    failed = [f"{m}: training failed ({results[m]['error']})" for m in methods if "error" in results[m]]
    done = [results[m]["run_dir"] for m in methods if "error" not in results[m]]
    if not done:
        sys.exit("error: every method failed; see the train.log files under " + args.runs)
    markdown = report.baseline_report(
        done, out, title=f"{args.corpus}, {budget or 'recipe budget'} per method", notes=failed, depth=depth or None
    )
    print(markdown)
    print(
        f"wrote {out}.md, {out}.csv, {out}.png{', ' + str(out) + '-depth.csv' if depth else ''} (total {(time.time() - start) / 60:.1f} min)"
    )


if __name__ == "__main__":
    main()
