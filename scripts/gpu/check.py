#!/usr/bin/env python
"""GPU acceptance check: mixed-precision training of every method, Admin's profiling under
``--fp16``, throughput against fairseq's ``transformer``, deep models in fp16, BLEU.

    python scripts/gpu/check.py --out gpu_check                  # on one GPU, a few minutes
    python scripts/gpu/check.py --out cpu_check --device cpu     # the same parts on a CPU (~1-2 h on 2 cores)
    python scripts/gpu/check.py --out /tmp/c --dry-run           # the same code path on CPU, tiny, minutes

Writes OUT/check.json (everything measured), OUT/check.md (the tables, the device, the
command) and OUT/check.png (training loss per update). The parts (``--parts``):

a. every method (Post-LN, Pre-LN, Admin, T-Fixup, B2T, B2T w/o LN, DeepNet) at 6L-6L
   ``transformer_iwslt_de_en`` size on IWSLT14-mini, in fp16 and in bf16, ``--updates``
   updates each with the method's IWSLT14-mini recipe (its optimizer and schedule, the
   IWSLT14 recipe's peak lr): losses finite and falling, the fp16 loss scale's history,
   words per second;
b. Admin's omegas profiled in the fp16 (and bf16) runs equal those of an fp32 run of the
   same seed and batch (profiling happens before fairseq converts the model to half);
c. ``benchmarks/throughput.py`` in fp16 and bf16: speed and peak-memory ratio of each arch
   against fairseq's ``transformer``, one process per precision (run alone on the GPU);
d. 18L-18L Post-LN, Admin, B2T and Pre-LN in fp16 for the same budget;
e. fairseq-generate + BLEU (tokenised and SacreBLEU) on the test set for every model of a and d;
f. ``benchmarks/decoding.py`` on part a's Pre-LN model of each precision: beam-search speed with
   ``--fused-attention`` against fairseq's attention, and whether both translate alike (after
   the training runs, alone on the GPU).

Resumable: a run with results (``RUNS/<name>/check.json``) is not run again (``--force``
reruns). ``--device cpu``: every part in fairseq's own fp16 and bf16 paths on a CPU (and fp32
beside them), at 6L-6L / 18L-18L d=64 for 80 / 40 updates: what a 2-core CPU finishes (a CPU
without fp16 arithmetic, most x86 ones, runs fp16 matrix products 20-90x slower than fp32),
so that a GPU only has to repeat runs already known to work. ``--dry-run`` (no GPU needed):
fp16 on CPU, tiny models, a few updates, 3L-3L for the "deep" part; it checks that the check
itself works, not the device.
"""

import argparse
import datetime
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from fairseq_layernorm_plugins.atomic import atomic_path, write_json, write_text  # noqa: E402
from fairseq_layernorm_plugins.methods import METHODS as REGISTRY  # noqa: E402
from fairseq_layernorm_plugins.methods import method_names  # noqa: E402

# method: (recipe under configs/iwslt14_mini and configs/iwslt14, extra fairseq flags, label): every
# registered method with an IWSLT14-mini recipe, and B2T without LayerNorm beside B2T
METHODS = {}
for _name in method_names("iwslt14_mini"):
    METHODS[_name] = (_name, [], REGISTRY[_name].label)
    if _name == "b2t":
        METHODS["b2t_noln"] = ("b2t", ["--b2t-no-layer-norm"], "B2T w/o LN")
DEEP = ("postln", "admin", "b2t", "preln")
PARTS = "abcdef"
OMEGA_TOLERANCE = 1e-4  # relative; fp16 / bf16 profiling must be the fp32 one


@dataclass(frozen=True)
class Budget:
    updates: int
    deep_updates: int
    layers: int
    deep_layers: int
    dim: int
    ffn: int
    heads: int
    tokens: int
    log_interval: int
    precisions: tuple
    bench: tuple  # benchmarks/throughput.py arguments
    decode: tuple  # benchmarks/decoding.py arguments
    generate: tuple = ()  # decoding settings over the recipe's (beam 5, last checkpoint)


GPU = Budget(
    updates=300,
    deep_updates=300,
    layers=6,
    deep_layers=18,
    dim=512,
    ffn=1024,
    heads=4,
    tokens=4096,
    log_interval=10,
    precisions=("fp16", "bf16"),
    bench=("--layers", "6", "--dim", "512", "--max-tokens", "4096", "--reps", "10"),
    decode=("--beam", "5", "--batch-size", "128", "--reps", "5"),
)
CPU = Budget(
    updates=80,
    deep_updates=40,
    layers=6,
    deep_layers=18,
    dim=64,
    ffn=256,
    heads=4,
    tokens=1024,
    log_interval=5,
    precisions=("fp16", "bf16", "fp32"),
    bench=("--layers", "2", "--dim", "64", "--max-tokens", "1024", "--reps", "3", "--no-memory"),
    decode=("--beam", "5", "--batch-size", "50", "--reps", "1"),
    # models this short-trained write to the length limit: keep their translations short
    generate=(("beam", 5), ("extra", ["--max-len-a", "1.2", "--max-len-b", "10"])),
)
DRY = Budget(
    updates=8,
    deep_updates=8,
    layers=2,
    deep_layers=3,
    dim=32,
    ffn=64,
    heads=2,
    tokens=1024,
    log_interval=1,
    precisions=("fp16",),
    bench=("--layers", "1", "--dim", "32", "--max-tokens", "512", "--reps", "1", "--warmup", "1", "--no-memory"),
    decode=("--beam", "2", "--batch-size", "16", "--reps", "1"),
    generate=(("beam", 2), ("extra", ["--max-len-a", "1.2", "--max-len-b", "5"])),
)


@dataclass(frozen=True)
class Run:
    part: str  # "a", "b" or "d"
    method: str
    precision: str
    layers: int
    updates: int

    @property
    def name(self):
        return f"{self.part}.{self.method}.{self.layers}L.{self.precision}"


def plan(parts, budget):
    """The training runs the parts need, in the order they are started (deep ones first: longest)."""
    runs = []
    if "d" in parts:
        runs += [Run("d", m, budget.precisions[0], budget.deep_layers, budget.deep_updates) for m in DEEP]
    if "a" in parts or "b" in parts or "f" in parts:
        # without part a: only the runs part b (Admin) and part f (Pre-LN) need
        methods = METHODS if "a" in parts else [m for m, part in (("admin", "b"), ("preln", "f")) if part in parts]
        runs += [Run("a", m, p, budget.layers, budget.updates) for m in methods for p in budget.precisions]
    if "b" in parts:
        runs.append(Run("b", "admin", "fp32", budget.layers, 1))
    return runs


def run_recipe(run, budget):
    """The method's IWSLT14-mini recipe at the run's depth and the check's model size, with
    the full IWSLT14 recipe's peak lr."""
    from fairseq_layernorm_plugins.recipes.config import Recipe, load_recipe, merge

    name = METHODS[run.method][0]
    recipe = load_recipe(f"iwslt14_mini/{name}")
    depth = f"{run.layers}L-{run.layers}L"
    data = merge(
        recipe.data,
        {
            "depths": {depth: {}},
            "tokens_per_update": budget.tokens,
            "precision": run.precision,
            "generate": dict(budget.generate),
            "fairseq": {
                "model": {
                    "encoder_embed_dim": budget.dim,
                    "decoder_embed_dim": budget.dim,
                    "encoder_ffn_embed_dim": budget.ffn,
                    "decoder_ffn_embed_dim": budget.ffn,
                    "encoder_attention_heads": budget.heads,
                    "decoder_attention_heads": budget.heads,
                },
                "optimization": {
                    "lr": load_recipe(f"iwslt14/{name}").fairseq["optimization"]["lr"],
                    "max_update": run.updates,
                },
                "dataset": {"max_tokens": budget.tokens},
                "checkpoint": {"no_save": False, "no_epoch_checkpoints": True},
                "common": {"log_interval": budget.log_interval},
            },
        },
    )
    return Recipe(recipe.name, recipe.path, data).with_depth(depth)


def train_run(run, args):
    """Train one run (skipped when it has results); returns its check.json record."""
    from fairseq_layernorm_plugins.recipes.launch import Launch, train
    from fairseq_layernorm_plugins.recipes.report import read_log_curves

    run_dir = Path(args.runs) / run.name
    done = run_dir / "check.json"
    if done.is_file() and not args.force:
        return json.loads(done.read_text())
    recipe = run_recipe(run, args.budget)
    extra = ["--no-progress-bar", *METHODS[run.method][1]]
    if run.method == "admin":
        extra += ["--admin-profile-json", str(run_dir / "admin_profile.json")]
    if (run_dir / "checkpoints").exists() and args.force:
        import shutil

        shutil.rmtree(run_dir / "checkpoints")
    launch = Launch(
        recipe,
        str(Path(args.data) / "bin"),
        str(run_dir / "checkpoints"),
        cpu_workers=1 if args.device == "cpu" else 0,
        precision=run.precision,
        seed=1,
        extra=extra,
    )
    record = {
        "name": run.name,
        "part": run.part,
        "method": run.method,
        "label": METHODS[run.method][2],
        "precision": run.precision,
        "layers": run.layers,
        "updates_planned": run.updates,
    }
    start = time.time()
    try:
        train(launch, run_dir)
    except RuntimeError as err:
        record["error"] = _first_error(run_dir / "train.log") or str(err).splitlines()[0]
    record["minutes"] = round((time.time() - start) / 60, 2)
    curves = read_log_curves(run_dir / "train.log") if (run_dir / "train.log").is_file() else {"train": [], "valid": []}
    record.update(training_summary(curves))
    if (run_dir / "admin_profile.json").is_file():
        record["admin_profile"] = json.loads((run_dir / "admin_profile.json").read_text())
    write_json(done, record)
    return record


def _first_error(log):
    """The first line of a log that says why fairseq stopped (NaN, loss scale, CUDA)."""
    pattern = re.compile(r"(FloatingPointError|Minimum loss scale|OverflowError|CUDA out of memory|Error:)")
    for line in Path(log).read_text(errors="replace").splitlines():
        if pattern.search(line):
            return line.strip()[:300]
    return None


def training_summary(curves):
    """Loss trajectory, fp16 loss-scale history and speed of one run's log curves."""
    losses = [p["loss"] for p in curves["train"]]
    scales = [p["loss_scale"] for p in curves["train"] if p.get("loss_scale") is not None]
    wps = [p["wps"] for p in curves["train"][1:] if p.get("wps")]  # the first interval includes start-up
    quarter = max(1, len(losses) // 4)
    valid = curves["valid"][-1] if curves["valid"] else {}
    return {
        "updates": curves.get("end", {}).get("update", 0),
        "train_loss": losses,
        "train_updates": [p["update"] for p in curves["train"]],
        "first_loss": statistics.mean(losses[:quarter]) if losses else None,
        "last_loss": statistics.mean(losses[-quarter:]) if losses else None,
        "finite": bool(losses) and all(math.isfinite(x) for x in losses) and math.isfinite(valid.get("loss", math.nan)),
        "falling": len(losses) >= 2 and statistics.mean(losses[-quarter:]) < statistics.mean(losses[:quarter]),
        "valid_loss": valid.get("loss"),
        "loss_scale": scales,
        "loss_scale_min": min(scales) if scales else None,
        "loss_scale_last": scales[-1] if scales else None,
        "wps": statistics.median(wps) if wps else None,
    }


def evaluate_run(record, args):
    """Part e: BLEU of one trained run (skipped when already scored)."""
    from fairseq_layernorm_plugins.recipes.evaluate import evaluate

    if "error" in record or "bleu" in record:
        return record
    run_dir = Path(args.runs) / record["name"]
    try:
        result = evaluate(run_dir, cpu=args.device == "cpu", echo=lambda *a: None)
        record["bleu"] = {k: v["score"] for k, v in result["bleu"].items()}
        record["sentences"] = result["sentences"]
    except (RuntimeError, ValueError) as err:
        record["bleu_error"] = str(err).splitlines()[0]
    write_json(run_dir / "check.json", record)
    return record


def omega_comparison(records):
    """Part b: the largest relative difference between each half-precision Admin profile and
    the fp32 one of the same seed and batch."""
    reference = next((r for r in records if r["part"] == "b" and "admin_profile" in r), None)
    rows = []
    for r in records:
        if r["part"] != "a" or r["method"] != "admin":
            continue
        row = {"precision": r["precision"], "reference": reference and reference["name"]}
        if reference is None or "admin_profile" not in r:
            row["error"] = "no profile" if reference else "no fp32 reference profile"
        else:
            diffs = [
                abs(x["omega"] - y["omega"]) / abs(y["omega"])
                for stack in ("encoder", "decoder")
                for x, y in zip(r["admin_profile"][stack], reference["admin_profile"][stack])
            ]
            count = sum(len(reference["admin_profile"][s]) for s in ("encoder", "decoder"))
            row.update(
                omegas=count,
                compared=len(diffs),
                max_rel_diff=max(diffs) if diffs else None,
                equal=len(diffs) == count and max(diffs) <= OMEGA_TOLERANCE,
            )
        rows.append(row)
    return rows


_BENCH_LINE = re.compile(
    r"^(transformer_\w+(?:\+fast)?)\s+speed ratio ([\d.]+) \(spread ([\d.]+)-([\d.]+)\).*?matmul FLOPs ratio ([\d.]+)"
    r"(?:; peak memory ratio ([\d.]+))?"
)
_BENCH_BASE = re.compile(r"baseline fairseq transformer (\d+) wps")


def throughput(precision, args):
    """Part c: run benchmarks/throughput.py once for ``precision``; its ratios per arch."""
    device = args.device
    cmd = [
        sys.executable,
        str(REPO / "benchmarks" / "throughput.py"),
        "--data",
        str(Path(args.data) / "bin"),
        "--device",
        device,
        "--precision",
        precision,
        *args.budget.bench,
    ]
    print(f"[throughput {precision}] $ {shlex.join(cmd)}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    result = {"precision": precision, "device": device, "command": shlex.join(cmd), "archs": {}}
    if proc.returncode:
        result["error"] = (out.strip().splitlines() or ["(no output)"])[-1]
        return result
    for line in proc.stdout.splitlines():
        if match := _BENCH_LINE.match(line):
            arch, speed, low, high, flops, memory = match.groups()
            result["archs"][arch] = {
                "speed_ratio": float(speed),
                "spread": [float(low), float(high)],
                "flops_ratio": float(flops),
                "memory_ratio": None if memory is None else float(memory),
            }
        elif match := _BENCH_BASE.search(line):
            result["baseline_wps"] = int(match.group(1))
    return result


_DECODE_LINE = re.compile(
    r"attention ([\d.]+) sentences/s\n--fused-attention speed ratio ([\d.]+) \(spread ([\d.]+)-([\d.]+)\).*?"
    r"same translation for (\d+)/(\d+) sentences"
)


def decoding(precision, args):
    """Part f: benchmarks/decoding.py on part a's Pre-LN model of ``precision``."""
    device = args.device
    run = Run("a", "preln", precision, args.budget.layers, args.budget.updates)
    checkpoint = Path(args.runs) / run.name / "checkpoints" / "checkpoint_last.pt"
    cmd = [
        sys.executable,
        str(REPO / "benchmarks" / "decoding.py"),
        *("--path", str(checkpoint), "--data", str(Path(args.data) / "bin")),
        *("--device", device, "--precision", precision, *args.budget.decode),
    ]
    print(f"[decoding {precision}] $ {shlex.join(cmd)}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    result = {"precision": precision, "device": device, "command": shlex.join(cmd)}
    match = _DECODE_LINE.search(proc.stdout)
    if proc.returncode or not match:
        result["error"] = ((proc.stdout + proc.stderr).strip().splitlines() or ["(no output)"])[-1]
        return result
    stock, ratio, low, high, same, sentences = match.groups()
    result.update(
        stock_sentences_per_s=float(stock),
        speed_ratio=float(ratio),
        spread=[float(low), float(high)],
        same=int(same),
        sentences=int(sentences),
    )
    return result


def device_facts(device, dry_run):
    import torch

    facts = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "date": datetime.date.today().isoformat(),
    }
    if device == "cuda":
        facts["device"] = torch.cuda.get_device_name(0)
        facts["memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    else:
        facts["device"] = f"CPU ({os.cpu_count()} cores, {torch.backends.cpu.get_cpu_capability()})" + (
            ", dry run" if dry_run else ""
        )
    return facts


def _f(value, digits=2):
    return "" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _training_table(records, title):
    lines = [
        f"### {title}",
        "",
        "| method | precision | updates | first -> last train loss | finite | falling | valid loss | loss scale min / last "
        "| words/s | BLEU tok | SacreBLEU |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        if "error" in r:
            lines.append(
                f"| {r['label']} | {r['precision']} | {r.get('updates', '')} | **failed**: {r['error']} | | | | | | | |"
            )
            continue
        scale = f"{_f(r['loss_scale_min'], 4)} / {_f(r['loss_scale_last'], 4)}" if r["loss_scale"] else "n/a"
        bleu = r.get("bleu", {})
        lines.append(
            f"| {r['label']} | {r['precision']} | {r['updates']} | {_f(r['first_loss'])} -> {_f(r['last_loss'])} | "
            f"{'yes' if r['finite'] else '**no**'} | {'yes' if r['falling'] else '**no**'} | {_f(r['valid_loss'])} | {scale} | "
            f"{_f(r['wps'], 0)} | {_f(bleu.get('tokenized'))} | {_f(bleu.get('sacrebleu'))} |"
        )
    return lines + [""]


def render(report):
    """check.md from the report dict."""
    facts = report["facts"]
    lines = [
        "# Mixed-precision check",
        "",
        f"Device: {facts['device']}; torch {facts['torch']} (CUDA {facts['cuda']}), Python {facts['python']}; "
        f"{facts['date']}; {report['minutes']:.1f} min.",
        "",
        "Command:",
        "",
        f"    {report['command']}",
        "",
        "Loss values: fairseq's label-smoothed loss in bits; first / last: means over the first and last quarter of the "
        f"logged intervals. BLEU on the {report.get('sentences', '')} IWSLT14-mini test lines, beam "
        f"{dict(report['budget']['generate']).get('beam', 5)}, last checkpoint.",
        "",
    ]
    by_part = {p: [r for r in report["runs"] if r["part"] == p] for p in "abd"}
    if by_part["a"]:
        lines += _training_table(by_part["a"], "a. Every method, mixed precision")
    if report.get("omegas") is not None:
        lines += [
            "### b. Admin's omegas under half precision vs fp32",
            "",
            "| precision | omegas compared | max relative difference | equal |",
            "|---|---|---|---|",
        ]
        for row in report["omegas"]:
            lines.append(
                f"| {row['precision']} | {row.get('compared', '')} | {_f(row.get('max_rel_diff'), 8) if 'error' not in row else row['error']} | "
                f"{'yes' if row.get('equal') else '**no**'} |"
            )
        lines += ["", f"Equal means within {OMEGA_TOLERANCE:g} relative.", ""]
    for bench in report.get("throughput", []):
        lines += [
            f"### c. Throughput vs fairseq `transformer`, {bench['precision']} ({bench['device']})",
            "",
            f"    {bench['command']}",
            "",
        ]
        if "error" in bench:
            lines += [f"**failed**: {bench['error']}", ""]
            continue
        lines += [
            f"Baseline: {bench.get('baseline_wps', '?')} words/s.",
            "",
            "| arch | speed ratio (median) | spread | peak memory ratio |",
            "|---|---|---|---|",
        ]
        for arch, row in bench["archs"].items():
            lines.append(
                f"| {arch} | {row['speed_ratio']:.3f} | {row['spread'][0]:.3f}-{row['spread'][1]:.3f} | {_f(row['memory_ratio'], 3)} |"
            )
        lines.append("")
    for bench in report.get("decoding", []):
        lines += [f"### f. Beam search with `--fused-attention`, {bench['precision']} ({bench['device']})", ""]
        lines += [f"    {bench['command']}", ""]
        if "error" in bench:
            lines += [f"**failed**: {bench['error']}", ""]
            continue
        lines += [
            f"fairseq's attention: {bench['stock_sentences_per_s']:.1f} sentences/s; `--fused-attention`: "
            f"speed ratio {bench['speed_ratio']:.3f} (spread {bench['spread'][0]:.3f}-{bench['spread'][1]:.3f}); "
            f"the same translation for {bench['same']} of {bench['sentences']} sentences.",
            "",
        ]
    if by_part["d"]:
        lines += _training_table(
            by_part["d"],
            f"d. {by_part['d'][0]['layers']}L-{by_part['d'][0]['layers']}L, {by_part['d'][0]['precision']}, same budget",
        )
    return "\n".join(lines)


def plot(report, path):
    from fairseq_layernorm_plugins.recipes.report import pyplot

    groups = [(p, [r for r in report["runs"] if r["part"] == p and r.get("train_loss")]) for p in "ad"]
    groups = [(p, rs) for p, rs in groups if rs]
    if not groups:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(groups), figsize=(6.5 * len(groups), 4.5), squeeze=False)
    for ax, (part, records) in zip(axes[0], groups):
        for r in records:
            style = {"bf16": "--", "fp32": ":"}.get(r["precision"], "-")
            color = f"C{list(METHODS).index(r['method'])}"  # one colour per method, one line style per precision
            ax.plot(r["train_updates"], r["train_loss"], style, color=color, label=f"{r['label']} {r['precision']}")
        ax.set_xlabel("update")
        ax.set_ylabel("training loss (bits)")
        ax.set_title(f"{'a' if part == 'a' else 'd'}. {records[0]['layers']}L-{records[0]['layers']}L")
        ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path


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
    args = parser.parse_args(argv)
    if set(args.parts) - set(PARTS):
        parser.error(f"--parts: choose from {PARTS}")
    import torch

    if args.dry_run:
        args.device = "cpu"
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
    report = {
        "facts": device_facts(args.device, args.dry_run),
        "command": shlex.join([sys.executable, *sys.argv])
        if argv is None
        else shlex.join(["scripts/gpu/check.py", *argv]),
        "budget": budget.__dict__,
        "runs": [],
    }

    if "c" in args.parts:  # alone on the device: timings
        report["throughput"] = [throughput(p, args) for p in budget.precisions]
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.jobs)))
    runs = plan(args.parts, budget)
    with ThreadPoolExecutor(args.jobs) as pool:  # each run is a fairseq subprocess; threads only wait
        records = list(pool.map(lambda run: train_run(run, args), runs))
        if "e" in args.parts:
            records = list(pool.map(lambda r: evaluate_run(r, args) if r["part"] != "b" else r, records))
    report["runs"] = records
    report["sentences"] = next((r["sentences"] for r in records if "sentences" in r), None)
    if "b" in args.parts:
        report["omegas"] = omega_comparison(records)
    if "f" in args.parts:  # after the training runs, alone on the device: timings
        report["decoding"] = [decoding(p, args) for p in budget.precisions]
    report["minutes"] = (time.time() - start) / 60
    out = Path(args.out)
    write_json(out / "check.json", report)
    markdown = render(report)
    write_text(out / "check.md", markdown + "\n")
    plot(report, out / "check.png")
    print(markdown)
    failed = [r["name"] for r in records if "error" in r] + [
        f"{part} {b['precision']}" for part in ("throughput", "decoding") for b in report.get(part, []) if "error" in b
    ]
    if failed:
        print(f"check: failed: {', '.join(failed)}", file=sys.stderr)
    print(f"check: wrote {out / 'check.md'}, {out / 'check.json'}, {out / 'check.png'} in {report['minutes']:.1f} min")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
