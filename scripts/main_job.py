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
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
# corpus: (recipe directory, default data directory, minutes per method, updates per method)
CORPORA = {
    "multi30k": ("multi30k", REPO / "data" / "multi30k.de-en", 8.0, 0),
    "iwslt14-mini": ("iwslt14_mini", REPO / "data" / "iwslt14-mini", 0.0, 200),
}


def prepare_data(args):
    """Prepare the corpus (skipped when up to date); returns its stamp."""
    if args.corpus == "multi30k":
        from fairseq_layernorm_plugins.prepare.multi30k import URL, default_raw_dir, prepare

        return prepare(
            args.data,
            raw_dir=args.raw_dir or default_raw_dir(),
            download_dir=args.download_dir,
            url=args.url or URL,
            test_lines=args.test_lines or None,
        )
    from fairseq_layernorm_plugins.prepare.iwslt14_mini import prepare

    return prepare(args.iwslt_dir, args.data, test_lines=args.test_lines or None)


def run_method(method, args):
    """Train (or resume) and evaluate one method; returns its results.json content."""
    from fairseq_layernorm_plugins.recipes.config import load_recipe
    from fairseq_layernorm_plugins.recipes.evaluate import evaluate
    from fairseq_layernorm_plugins.recipes.launch import Launch, data_bin, run_dir, train

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
    launch = Launch(
        recipe,
        str(data_bin(args.data, recipe, REPO)),
        str(run / "checkpoints"),
        cpu_workers=1,
        seed=args.seed,
        extra=extra,
    )
    start = time.time()
    try:
        train(launch, run)
    except RuntimeError as err:  # e.g. a diverged run: fairseq stops on NaN/inf; the other methods go on
        print(f"[{method}] training failed: {err}", flush=True)
        return {"error": str(err).splitlines()[0]}
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

    from fairseq_layernorm_plugins.prepare.textio import DataError
    from fairseq_layernorm_plugins.recipes.report import baseline_report

    start = time.time()
    try:
        stamp = prepare_data(args)
    except DataError as err:
        sys.exit(f"error: {err}")
    print(f"{args.corpus} ({args.data}): " + ", ".join(f"{k} {v}" for k, v in stamp["sizes"].items()), flush=True)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.jobs)))  # inherited by fairseq
    budget = " and ".join(
        filter(
            None,
            [f"{args.minutes:g} min" if args.minutes else "", f"{args.max_update} updates" if args.max_update else ""],
        )
    )
    print(
        f"training {len(methods)} method(s), {args.jobs} at once, each for at most {budget or 'its recipe'}", flush=True
    )
    results = {}
    with ThreadPoolExecutor(args.jobs) as pool:  # each method is a fairseq subprocess; threads only wait
        futures = {pool.submit(run_method, method, args): method for method in methods}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
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
