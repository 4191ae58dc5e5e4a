#!/usr/bin/env python
"""GPU acceptance check: mixed-precision training of every method, Admin's profiling under
``--fp16``, throughput against fairseq's ``transformer``, deep models in fp16, BLEU.

    python scripts/gpu/check.py --out gpu_check                  # one GPU: over 10 min on an H200
    python scripts/gpu/check.py --out cpu_check --device cpu     # the same parts on a CPU (~1-2 h on 2 cores)
    python scripts/gpu/check.py --out /tmp/c --dry-run           # the same code path on CPU, tiny, minutes

Writes OUT/check.json (everything measured), OUT/check.md (the tables, the device, the
command) and OUT/check.png (training loss per update). The parts (``--parts``):

a. every method with an IWSLT14-mini recipe (``--methods``; B2T w/o LN beside B2T) at 6L-6L
   ``transformer_iwslt_de_en`` size on IWSLT14-mini, in fp16 and in bf16, ``--updates``
   updates each with the method's IWSLT14-mini recipe (its optimizer and schedule, the
   IWSLT14 recipe's peak lr): losses finite and falling, the fp16 loss scale's history,
   words per second;
b. Admin's omegas profiled in the fp16 (and bf16) runs equal those of an fp32 run of the
   same seed and batch (profiling happens before fairseq converts the model to half);
c. ``benchmarks/throughput.py`` in fp16 and bf16: speed and peak-memory ratio of each arch
   with an IWSLT14-mini recipe (the methods of parts a and d)
   against fairseq's ``transformer``, one process per precision (run alone on the GPU);
d. 18L-18L Post-LN, Admin, B2T and Pre-LN (``--deep-methods``) in fp16 for the same budget;
e. fairseq-generate + BLEU (tokenised and SacreBLEU) on the test set for every model of a and d;
f. ``benchmarks/decoding.py`` on part a's Pre-LN model of each precision: beam-search speed with
   ``--fused-attention`` against fairseq's attention, and whether both translate alike (after
   the training runs, alone on the GPU).

Resumable: a run with results (``RUNS/<name>/check.json``) is not run again (``--force``
reruns). ``--deadline M`` starts nothing after M minutes and ``--carry OLD/check.json`` keeps an
earlier check's results, so that a lease-sized machine finishes the check over several calls
(docs/cluster.md):

    python scripts/gpu/check.py --out gpu_check --carry docs/gpu/check.json --deadline 5 --jobs 8

``--device cpu``: every part in fairseq's own fp16 and bf16 paths on a CPU (and fp32
beside them), at 6L-6L / 18L-18L d=64 for 80 / 40 updates: what a 2-core CPU finishes (a CPU
without fp16 arithmetic, most x86 ones, runs fp16 matrix products 20-90x slower than fp32),
so that a GPU only has to repeat runs already known to work. ``--dry-run`` (no GPU needed):
fp16 on CPU, tiny models, a few updates, 3L-3L for the "deep" part, the papers' six methods
unless ``--methods`` says otherwise; it checks that the check itself works, not the device.
"""

import argparse
import json
import shlex
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from fairseq_layernorm_plugins.atomic import write_json, write_text  # noqa: E402
from fairseq_layernorm_plugins.experiments import experiment, render_check  # noqa: E402
from fairseq_layernorm_plugins.experiments.gpu_check import (  # noqa: E402
    BENCHMARKS,
    CPU,
    DEEP,
    DRY,
    GPU,
    METHODS,
    OMEGA_TOLERANCE,
    PARTS,
    carried,
    carried_from,
    chosen_deep,
    chosen_methods,
    plan,
    run_recipe,
    unfinished,
)
from fairseq_layernorm_plugins.methods import METHODS as REGISTRY  # noqa: E402


def train_run(run, args):
    """Part a, b or d: one run trained once (its record kept in RUNS/<name>/check.json; ``--force``
    trains it again; without either, a carried record is taken as it is); returns its record, or
    a "not_run" one past the deadline."""
    run_dir = Path(args.runs) / run.name
    to_train = args.force or not (run_dir / "check.json").is_file()
    if to_train and not args.force and run.name in args.carried_runs:
        return args.carried_runs[run.name]
    if to_train and not args.in_time():
        return {"name": run.name, "label": METHODS[run.method][2], **asdict(run), "not_run": "deadline"}
    profile = run_dir / "admin_profile.json"
    extra = ["--no-progress-bar", *METHODS[run.method][1]]
    extra += ["--admin-profile-json", str(profile)] if run.method == "admin" else []
    record = {"name": run.name, "label": METHODS[run.method][2], **asdict(run)}
    return experiment.train_once(
        run_recipe(run, args.budget),
        run_dir / "check.json",
        record,
        args.data,
        seed=1,
        extra=extra,
        precision=run.precision,
        cpu_workers=1 if args.device == "cpu" else 0,
        force=args.force,
        attach={"admin_profile": profile},
    )


def evaluate_run(record, args):
    """Part e: BLEU of one trained run of part a or d (skipped when already scored, not run or
    carried from another machine; past the deadline, marked "bleu_not_run")."""
    if record["part"] == "b" or any(key in record for key in ("error", "bleu", "not_run", "carried")):
        return record
    if not args.in_time():
        return {**record, "bleu_not_run": "deadline"}
    record |= experiment.test_scores(Path(args.runs) / record["name"], cpu=args.device == "cpu")
    write_json(Path(args.runs) / record["name"] / "check.json", record)
    return record


def benchmark(part, script, precision, args, *options):
    """Part c or f: ``benchmarks/SCRIPT`` for ``precision`` on the check's device, in a process
    of its own (alone on the device: timings); its JSON numbers, or the error; the carried
    numbers as they are; {"not_run"} past the deadline."""
    if (part, precision) in args.carried_benches:
        return args.carried_benches[part, precision]
    if not args.in_time():
        return {"precision": precision, "device": args.device, "not_run": "deadline"}
    argv = ["--data", str(Path(args.data) / "bin"), "--device", args.device, "--precision", precision, *options]
    numbers = Path(args.runs) / f"{part}.{Path(script).stem}.{precision}.json"
    return {"precision": precision, "device": args.device, **experiment.run_benchmark(script, argv, numbers)}


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    bundled = REPO / "gpu_bundle" / "data" / "iwslt14-mini"
    default_data = bundled if bundled.is_dir() else REPO / "data" / "iwslt14-mini-gpu"
    parser.add_argument("--out", required=True, help="writes OUT/check.json, OUT/check.md, OUT/check.png")
    parser.add_argument(
        "--data",
        default=str(default_data),
        help=f"prepared IWSLT14-mini folder (default: {default_data.relative_to(REPO)}; scripts/gpu/collect.py makes it)",
    )
    parser.add_argument(
        "--runs", default=str(REPO / "runs" / "gpu-check"), help="training runs (default: runs/gpu-check)"
    )
    parser.add_argument("--parts", default=PARTS, help=f"which parts, from {PARTS} (default: all)")
    parser.add_argument(
        "--methods",
        help=f"part a's methods, comma-separated, from {', '.join(METHODS)}; all (default; a dry run: the papers' six)",
    )
    parser.add_argument(
        "--deep-methods", help=f"part d's methods, comma-separated, from {', '.join(DEEP)} (default: all four)"
    )
    parser.add_argument("--jobs", type=int, help="training runs at once (default: 4 on a GPU, 2 on a CPU)")
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda", help="cuda (default), or cpu: the same parts on a CPU"
    )
    parser.add_argument("--updates", type=int, help="updates per run of parts a (default: 300; CPU 80; dry run 8)")
    parser.add_argument("--deep-updates", type=int, help="updates per run of part d (default: 300; CPU 40; dry run 8)")
    parser.add_argument(
        "--dry-run", action="store_true", help="CPU, fp16, tiny models and budgets: checks the check itself"
    )
    parser.add_argument("--force", action="store_true", help="rerun runs that already have results")
    parser.add_argument(
        "--deadline", type=float, metavar="M", help="start no run or benchmark after M minutes (default: none)"
    )
    parser.add_argument(
        "--carry",
        metavar="CHECK_JSON",
        help="an earlier check.json whose results (same budget, no error) are kept, not measured again",
    )
    args = parser.parse_args(argv)
    if set(args.parts) - set(PARTS):
        parser.error(f"--parts: choose from {PARTS}")
    import torch

    if args.dry_run:
        args.device = "cpu"
    try:
        methods = chosen_methods(args.methods, args.dry_run)
    except ValueError as e:
        parser.error(f"--methods: {e}")
    try:
        deep = chosen_deep(args.deep_methods)
    except ValueError as e:
        parser.error(f"--deep-methods: {e}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.exit(2, "error: no CUDA device; run with --device cpu (or --dry-run to check the check)\n")
    if not (Path(args.data) / "bin").is_dir():
        parser.exit(
            2,
            f"error: {args.data}: no bin/ folder; prepare it with scripts/gpu/collect.py or scripts/prepare_iwslt14_mini.py\n",
        )
    budget = DRY if args.dry_run else CPU if args.device == "cpu" else GPU
    args.budget = budget = replace(
        budget, updates=args.updates or budget.updates, deep_updates=args.deep_updates or budget.deep_updates
    )
    args.jobs = args.jobs or (2 if args.device == "cpu" else 4)
    start = time.time()
    args.in_time = lambda: args.deadline is None or time.time() < start + 60 * args.deadline
    earlier = None
    if args.carry:
        try:
            earlier = json.loads(Path(args.carry).read_text())
        except (OSError, ValueError) as e:
            parser.exit(2, f"error: --carry {args.carry}: {e}\n")
    archs = [REGISTRY[name].model for name in methods if name in REGISTRY and name != "postln"]  # part c's
    args.carried_runs, args.carried_benches = carried(earlier, budget, archs, args.parts)
    command = shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(["scripts/gpu/check.py", *argv])
    facts = experiment.device_facts(args.device, ", dry run" if args.dry_run else "")
    report = {"facts": facts, "command": command, "budget": budget.__dict__, "runs": []}
    if args.carried_runs or args.carried_benches:
        report["carried_from"] = carried_from(earlier)
    out = Path(args.out)
    runs = plan(args.parts, budget, methods, deep)
    trained = {}
    # what --carry holds beyond this check's parts and methods stays in its report
    kept = [r for name, r in args.carried_runs.items() if name not in {run.name for run in runs}]
    for part, key in BENCHMARKS.items():
        if part not in args.parts and any(p == part for p, _ in args.carried_benches):
            report[key] = [b for (p, _), b in args.carried_benches.items() if p == part]
    precisions = [*budget.precisions, "fp32"]
    # plan() starts part d, then part a by method and precision, then part b: the report keeps that order
    plan_order = lambda r: ("dab".index(r["part"]), list(METHODS).index(r["method"]), precisions.index(r["precision"]))

    def save(final=False):
        """OUT/check.json and check.md as far as the check has come (a machine taken back mid-way
        leaves them), and at the end check.png; returns the markdown."""
        report["runs"] = sorted([trained[run] for run in runs if run in trained] + kept, key=plan_order)
        report["sentences"] = next((r["sentences"] for r in report["runs"] if "sentences" in r), None)
        if "b" in args.parts or any(r["part"] == "b" for r in kept):
            report["omegas"] = render_check.omega_rows(report["runs"], OMEGA_TOLERANCE)
        report["minutes"] = (time.time() - start) / 60
        write_json(out / "check.json", report)
        if final:
            return render_check.check_files(report, out, OMEGA_TOLERANCE, list(METHODS))
        write_text(out / "check.md", render_check.check_report(report, OMEGA_TOLERANCE) + "\n")

    if "c" in args.parts:  # alone on the device: timings
        report["throughput"] = []
        for p in budget.precisions:
            report["throughput"].append(benchmark("c", "throughput.py", p, args, *budget.bench, "--archs", *archs))
            save()
    for run, record in experiment.parallel(lambda run: train_run(run, args), runs, args.jobs):
        trained[run] = record
        save()
    if "e" in args.parts:
        for run, record in experiment.parallel(lambda run: evaluate_run(trained[run], args), runs, args.jobs):
            trained[run] = record
            save()
    if "f" in args.parts:  # part a's Pre-LN model of each precision, after the training runs, alone on the device
        preln = {r.precision: Path(args.runs) / r.name for r in runs if r.part == "a" and r.method == "preln"}
        checkpoint = lambda p: preln[p] / "checkpoints" / "checkpoint_last.pt"
        report["decoding"] = [
            benchmark("f", "decoding.py", p, args, "--path", str(checkpoint(p)), *budget.decode)
            if (("f", p) in args.carried_benches or checkpoint(p).is_file())
            else {"precision": p, "device": args.device, "not_run": "no Pre-LN checkpoint on this machine"}
            for p in budget.precisions
        ]
    print(save(final=True))
    failed, not_run = unfinished(report)
    if failed:
        print(f"check: failed: {', '.join(failed)}", file=sys.stderr)
    if not_run:
        print(f"check: not run: {', '.join(not_run)}; run again with --carry {out / 'check.json'}", file=sys.stderr)
    print(f"check: wrote {out / 'check.md'}, {out / 'check.json'}, {out / 'check.png'} in {report['minutes']:.1f} min")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
