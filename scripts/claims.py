#!/usr/bin/env python
"""Each paper's headline claim at CPU scale, on Multi30k De-En, trained long enough to decide:

    python scripts/claims.py b2t --jobs 2                           # -> runs/claims/b2t.{md,json,png}
    python scripts/claims.py admin --jobs 2 --out docs/claims/admin
    python scripts/claims.py --list                                 # the claims and their runs

A claim is a handful of runs of the Multi30k recipes (configs/multi30k/<method>.yaml: each
method's own model options, initialisation, dropout and decoding) at one depth and width,
trained with the same optimizer, peak learning rate and schedule family:

* "warm-up W": linear from 1e-7 to the peak over W updates, then peak * sqrt(W / t)
  (fairseq's inverse_sqrt, the papers' Post-LN schedule);
* "no warm-up": the peak from the first update, then the same decay after update W
  (inverse_sqrt with warmup_init_lr = lr), so that the two differ only in the warm-up.

Every run is validated every ``--validate-every`` updates and at the end of every epoch
(fairseq's default; a Multi30k epoch is about 250 updates of 2,048 tokens): loss, and greedy
SacreBLEU on the 1,014 validation sentences (fairseq's ``--eval-bleu``, detokenised and
cased); at the end the
last checkpoint translates test_2016_flickr with beam 5 (detokenised, cased SacreBLEU). A run
is "diverged" when its loss became NaN/inf, "stalled" when its final validation NLL is not
below the unigram entropy of the training targets, otherwise "trained".

Writes OUT.json (per run: spec, status, validation curve, final numbers), OUT.md (table and
command) and OUT.png (validation BLEU and loss against updates). Resumable: finished runs are
kept in OUT.json, an interrupted run resumes from its checkpoint_last.pt, and a run whose
spec (or the budget) changed is trained again from scratch (an option set to fairseq's own
default is no change; a default its architecture fills in is recorded, and a changed one is a
change: ``recipes.specs``), except that a run given more
``--updates`` (with another ``--out``: OUT.json keeps one budget) goes on from where it ended,
the schedule being the same for any budget. Commands may fill one OUT at once, each with
its ``--runs-only``: each keeps the runs the others finished in OUT.json.

To convergence: ``--patience P`` validates as above and stops a run once its validation loss
has not improved for P validations in a row, epoch ends included (fairseq's ``--patience``, kept
across resumes), with ``--updates`` as the cap; the test set is then translated by ``checkpoint_best.pt``, the
checkpoint of the lowest validation loss, and, as the papers score theirs, by the mean of the run's last 5
checkpoints (saved every ``--validate-every`` updates; RUN/average5/). ``shallow`` is the claim made for it:

    python scripts/claims.py shallow --patience 5 --validate-every 500 --updates 30000 --out docs/claims/shallow

A claim's fixed-budget runs go on to convergence from their last checkpoint (more updates,
``--patience`` and ``--validate-every`` do not change how a run trains), for example:

    python scripts/claims.py b2t --patience 5 --validate-every 500 --updates 30000 --out docs/claims/b2t-converged

The newer methods (DLCL, ResiDual, Peri-LN, Mix-LN, LayerNorm Scaling, DyT, ReZero, Sub-LN): ``newer``
and ``newer-nowarmup`` run them in the B2T and T-Fixup claims' settings beside Pre-LN and Post-LN
(a method added after a claim ran trains alone, the finished runs kept: ``newer --runs-only subln``,
``newer-nowarmup --runs-only "subln no warm-up"``).

Language models: ``lm`` is the B2T paper's Table 3 claim on WikiText-2 (configs/wikitext2/, the
language-model recipes scaled to a CPU; runs at 6L and 16L; validation loss only, test
perplexity by fairseq-eval-lm of checkpoint_best.pt; prepared with fairseq-ln-prepare wikitext2):

    python scripts/claims.py lm --updates 800 --validate-every 200 --jobs 2 --out docs/claims/lm

Seeds: ``--seed N`` (N != 1) trains in RUNS/CLAIM-seedN and writes OUT-seedN.*; once runs lie
under two or more seeds, OUT-seeds.md and .png compare them (mean ± sd, differences paired by seed
from the claim's baseline and from each run its ``also_against`` names; runs trained with ``--patience``
are also listed one row per seed, with where each stopped and its training hours).
Several seeds in one command share one queue of ``--jobs`` (in the order given):

    python scripts/claims.py admin --seed 2 --runs-only "preln radam" "admin radam" --out docs/claims/admin
    python scripts/claims.py shallow --seed 1 2 3 --patience 5 --validate-every 500 --updates 30000 --jobs 2 \\
        --out docs/claims/shallow

Device: ``--device cuda`` trains each run on the GPU instead of one CPU process, ``--jobs`` runs
sharing it (and decodes there). The run's spec is the CPU run's (the device changes the dropout
masks and the rounding, not the recipe), so a GPU run completes a CPU seed's set; each record and
report names the devices it trained on. ``--report-only`` trains nothing and writes the reports
from OUT.json (e.g. of runs made on a GPU node), with the runs still training (their train.log
so far, marked "training", no test score). OUT.json keeps finished runs only; the others, as
far as trained, go to OUT-unfinished.json, so that a run whose directory is gone is still
reported, marked "stopped" (its next command trains it from scratch):

    python scripts/claims.py shallow --seed 2 3 --runs-only postln admin --device cuda --jobs 8 \\
        --patience 5 --validate-every 500 --updates 30000 --out docs/claims/shallow
    python scripts/claims.py admin --patience 5 --validate-every 500 --updates 30000 \\
        --out docs/claims/admin-converged --report-only   # where a claim's runs stand

Precision: ``--precision fp16`` (or bf16) trains every run in fairseq's --fp16 (on a CPU too), in
RUNS/CLAIM-fp16; ``--against`` sets each run beside the same run of the claim's OUT.json in
another precision (here fp32), same budget:

    python scripts/claims.py b2t --precision fp16 --jobs 2 --out docs/claims/b2t-fp16 --against docs/claims/b2t.json
"""

import argparse
import json
import time
from pathlib import Path

import torch

from fairseq_layernorm_plugins.experiments import experiment, render
from fairseq_layernorm_plugins.experiments.claim import (
    UPDATES,
    budget,
    claim_dir,
    load_claims,
    run_spec,
    train_run,
    unfinished_records,
    unigram_of,
)
from fairseq_layernorm_plugins.experiments.experiment import REPO, seed_path
from fairseq_layernorm_plugins.recipes.specs import same_run

DATA_DIRS = {"multi30k": "multi30k.de-en", "wikitext2": "wikitext-2"}  # under data/
CLAIMS = load_claims()  # configs/claims.yaml


def other_precision(parser, args):
    """(precision, records) of ``--against``: the same claim's OUT.json in another precision,
    made with this command's budget but for the precision."""
    path = Path(args.against)
    try:
        other = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        parser.error(f"--against: {path}: {err}")
    records = [r for r in other.get("runs", []) if r.get("spec", {}).get("claim") == args.claim]
    if not records:
        parser.error(f"--against: {path} holds no runs of the {args.claim} claim")
    theirs = other.get("budget", {}).get("precision", "fp32")
    if theirs == args.precision:
        parser.error(f"--against: {path} holds {theirs} runs, the precision this command trains in")
    same = lambda b: {key: value for key, value in b.items() if key != "precision"}
    if same(other.get("budget", {})) != same(budget(args)):
        parser.error(f"--against: {path} holds runs made with {other.get('budget')}, not {budget(args)}")
    return theirs, records


class SeedRuns:
    """One seed's runs of a claim: its OUT.json (``Results``: FIRST for seed 1, FIRST-seedN
    otherwise), the records in it made as ``args`` would make them now (``done``, by label),
    and ``args`` with that seed."""

    def __init__(self, claim, args, first, argv):
        self.args, self.out = args, seed_path(first, args.seed)
        self.results = experiment.Results(
            f"{self.out}.json",
            budget(args),
            None if args.report_only else experiment.command_line("scripts/claims.py", argv),
        )
        self.specs = {run.label: run_spec(claim, run, args)[1] for run in claim.runs}
        self.done = self.made_now(self.results.records)

    def made_now(self, records):
        """{label: record} of ``records`` made as ``args`` would make them now."""
        return {
            r["label"]: r
            for r in records
            if r["label"] in self.specs and same_run(r.get("spec"), self.specs[r["label"]])
        }

    def add(self, label, record):
        """Keep a finished run's record and write OUT.json again, taking in the runs that
        another command (other ``--runs-only``) finished in it meanwhile."""
        self.done[label] = record
        self.done = {**self.made_now(self.results.write(self.done.values())), **self.done}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("claim", nargs="?", choices=sorted(CLAIMS))
    parser.add_argument("--list", action="store_true", help="print the claims and their runs, and exit")
    parser.add_argument("--runs-only", nargs="+", metavar="LABEL", help="train only these runs of the claim")
    parser.add_argument("--updates", type=int, default=UPDATES, help=f"updates per run (default {UPDATES})")
    parser.add_argument("--validate-every", type=int, default=200, help="validate every N updates (default 200)")
    parser.add_argument(
        "--patience",
        type=int,
        default=0,
        help="train until the validation loss has not improved for P validations (fairseq's --patience), "
        "--updates at most, and score checkpoint_best.pt (default 0: train --updates, score the last)",
    )
    parser.add_argument("--max-tokens", type=int, default=2048, help="tokens per update (default 2048)")
    parser.add_argument(
        "--seed",
        type=int,
        nargs="+",
        default=[1],
        help="fairseq's --seed; other than 1: RUNS/CLAIM-seedN and OUT-seedN; several: every seed's runs in one "
        "queue of --jobs, in the order given (default 1)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs trained at once, each with cores / JOBS threads")
    parser.add_argument(
        "--data-dir",
        help="the prepared corpus, prepared if missing (default: data/multi30k.de-en; a language-model claim's "
        "data/wikitext-2)",
    )
    parser.add_argument(
        "--test-lines", type=int, default=0, help="prepare the test set as N evenly spaced lines (default 0: all)"
    )
    parser.add_argument(
        "--init-style",
        choices=("paper", "fairseq"),
        help="start every run of the claim from this initialisation (see --init-style of the archs) instead of "
        "the claim's own; run directories go to RUNS/CLAIM-init-STYLE/",
    )
    parser.add_argument(
        "--precision",
        choices=("fp32", "fp16", "bf16"),
        default="fp32",
        help="train every run in this precision (fairseq's --fp16 / --bf16, on a CPU too: docs/mixed_precision.md); "
        "run directories go to RUNS/CLAIM-PRECISION/ (default fp32)",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="train and decode each run on one CPU process or on the GPU (cuda: --jobs runs share it); a run's "
        "record names every device it trained on, resumed on either (default cpu)",
    )
    parser.add_argument(
        "--against",
        metavar="OTHER.json",
        help="the same claim's OUT.json in another --precision: also writes OUT-vs-PRECISION.{md,png}, each run "
        "beside its run there",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: write OUT.md and .png (and the seeds report) from the runs OUT.json holds "
        "and, as far as they have trained, the runs still training (kept in OUT-unfinished.json)",
    )
    parser.add_argument("--runs", default=str(REPO / "runs" / "claims"), help="run directories go to RUNS/CLAIM/")
    parser.add_argument("--out", help="writes OUT.md, OUT.png, OUT.json (default: RUNS/CLAIM)")
    args = parser.parse_args(argv)
    if args.list or not args.claim:
        for name, claim in CLAIMS.items():
            every = f", every run {claim.model}" if claim.model else ""
            print(f"{name}: {claim.paper}, {claim.depth} d={claim.width} lr {claim.lr:g}{every}\n  {claim.statement}")
            for run in claim.runs:
                print(
                    f"  - {run.label}: {run.method}, {run.optimizer}, warm-up {run.warmup or 'none'} {run.model or ''}"
                )
        return
    claim = CLAIMS[args.claim]
    if args.device == "cuda" and not args.report_only and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")
    unknown = set(args.runs_only or ()) - {r.label for r in claim.runs}
    if unknown:
        parser.error(f"{args.claim} has no run(s) {sorted(unknown)}; see --list")
    first = Path(args.out) if args.out else claim_dir(args, seed=1)  # seed 1's OUT; seed N's is FIRST-seedN
    args.data_dir = args.data_dir or str(REPO / "data" / DATA_DIRS[claim.corpus])
    if args.against and len(set(args.seed)) > 1:
        parser.error("--against compares one seed's runs: give one --seed")
    seeds = {seed: argparse.Namespace(**{**vars(args), "seed": seed}) for seed in dict.fromkeys(args.seed)}
    against = other_precision(parser, seeds[args.seed[0]]) if args.against else None
    experiment.prepare_corpus(claim.corpus, args.data_dir, test_lines=args.test_lines)  # as the main job prepares it
    wanted = [r for r in claim.runs if not args.runs_only or r.label in args.runs_only]
    seeds = {seed: SeedRuns(claim, seed_args, first, argv) for seed, seed_args in seeds.items()}
    missing = [(seed, run) for seed, runs in seeds.items() for run in wanted if run.label not in runs.done]
    todo = [] if args.report_only else missing
    named = "" if len(seeds) == 1 else f" (seeds {', '.join(map(str, seeds))})"
    print(
        f"{args.claim}: {len(wanted) * len(seeds) - len(missing)} of {len(wanted) * len(seeds)} runs done{named}; "
        f"training {len(todo)}, {args.jobs} at once"
    )
    start = time.time()
    work = lambda item: train_run(claim, item[1], seeds[item[0]].args)  # noqa: E731
    for n, ((seed, run), record) in enumerate(experiment.parallel(work, todo, args.jobs), 1):
        seeds[seed].add(run.label, record)
        print(
            f"[{n}/{len(todo)}] {'' if len(seeds) == 1 else f'seed {seed}: '}{render.claim_progress(run, record)}",
            flush=True,
        )
    unigram = unigram_of(claim, args.data_dir)
    for runs in seeds.values():
        out, done = runs.out, list(runs.done.values())
        begun = [run for run in wanted if run.label not in runs.done]
        training = unfinished_records(claim, begun, runs.args, out, done=runs.done) if args.report_only else []
        if not done + training:  # a seed none of whose runs is made or begun yet (--report-only)
            continue
        print(render.claim_report(args.claim, claim, done + training, runs.results.commands, out, unigram))
        print(f"wrote {out}.md, .png" + ("" if args.report_only else ", .json"))
        if training:
            print(f"  with {', '.join(r['label'] for r in training)} as far as trained: in {out}-unfinished.json")
        if against and done:
            beside = f"{out}-vs-{against[0]}"
            print(render.precision_report(args.claim, claim, done, against[1], beside))
            print(f"wrote {beside}.md, .png")
    print(f"{(time.time() - start) / 60:.1f} min for {len(todo)} runs")
    compared = None if claim.language_model else render.claim_seeds_report(args.claim, claim, first)
    if compared:
        print(f"{compared}\nwrote {first}-seeds.md, .png")


if __name__ == "__main__":
    main()
