#!/usr/bin/env python
"""Seconds per update of ``fairseq-train --cpu`` in fp32, bf16 and fp16 (with and without the
plugin's ``fp16_cpu_products``), for fairseq's own ``transformer`` and the methods asked for,
each ratio against fairseq's ``transformer`` in fp32 measured in the same run:

    python benchmarks/cpu_precision.py [--data data/multi30k.de-en/bin] [--layers 6] [--dim 64] \\
        [--archs transformer_preln transformer_admin] [--updates 30] [--json PATH]

Every run is the console script a user types (``--cpu --fp16`` / ``--bf16``), one thread,
``--max-tokens 2048``, no validation; its time per update is read from fairseq's own
``train_inner`` logs after the first logging interval (start-up and the first batches left
out): the median of the intervals' rates (``ups``, which fairseq rounds to 0.01) or the
wall-clock span over the updates (``wall``, rounded to 1 s), whichever is the more precise.
Runs are sequential: on a machine busy with other work the ratios move, so compare rows of
one run only. The report names the CPU and whether it has fp16 arithmetic (AVX512-FP16 /
AMX-FP16), where ``fp16_cpu_products`` leaves torch's kernels alone: there the two fp16 rows
time the same code.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = ("transformer", "fp32")
# precision -> (fairseq-train flags, patches turned off)
PRECISIONS = {
    "fp32": ((), ""),
    "bf16": (("--bf16",), ""),
    "fp16": (("--fp16",), ""),
    "fp16, torch's kernels": (("--fp16",), "fp16_cpu_products"),
}


def default_data():
    for name in ("multi30k.de-en", "iwslt14-mini-gpu", "iwslt14-mini"):
        if (REPO / "data" / name / "bin").is_dir():
            return REPO / "data" / name / "bin"
    return None


def seconds_per_update(args, arch, precision):
    """Seconds per update of one fairseq-train run (:func:`from_logs`)."""
    flags, patches_off = PRECISIONS[precision]
    env = dict(os.environ, OMP_NUM_THREADS="1", FAIRSEQ_LAYERNORM_PLUGINS_NO_PATCH=patches_off)
    size = [f"--{side}-{key}" for side in ("encoder", "decoder") for key in ("layers", "embed-dim", "ffn-embed-dim")]
    values = [args.layers, args.dim, 4 * args.dim] * 2
    with tempfile.TemporaryDirectory() as save_dir:
        command = [
            str(Path(sys.executable).with_name("fairseq-train")),
            str(args.data),
            *("--user-dir", str(REPO / "fairseq_layernorm_plugins"), "--arch", arch),
            *(str(x) for pair in zip(size, values) for x in pair),
            *("--encoder-attention-heads", "4", "--decoder-attention-heads", "4"),
            *("--optimizer", "adam", "--lr", "5e-4", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "100"),
            *("--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"),
            *("--max-tokens", "2048", "--max-update", str(args.updates), "--cpu", "--seed", "1"),
            *("--no-save", "--disable-validation", "--save-dir", save_dir, "--num-workers", "0"),
            *("--log-format", "json", "--log-interval", str(args.log_interval), *flags),
        ]
        proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"{arch} {precision}: fairseq-train failed: {last}")
    logs = [json.loads(line[line.index("{") :]) for line in proc.stdout.splitlines() if "train_inner" in line]
    if len(logs) < 2:
        raise SystemExit(f"{arch} {precision}: fewer than two logging intervals; raise --updates")
    return from_logs(logs)


def from_logs(logs):
    """Seconds per update from fairseq's ``train_inner`` records after the first: the median of
    1 / ups (relative rounding error up to 0.005 / ups) or the ``wall`` span over the updates
    (up to 1 s over the span), whichever error bound is smaller."""
    rates = [float(r["ups"]) for r in logs[1:]]
    span = float(logs[-1]["wall"]) - float(logs[0]["wall"])
    updates = int(logs[-1]["num_updates"]) - int(logs[0]["num_updates"])
    rate_error = 0.005 / min(rates) if min(rates) > 0 else math.inf
    wall_error = 1 / span if span > 0 else math.inf
    if rate_error <= wall_error:
        return statistics.median(1 / rate for rate in rates)
    return span / updates


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=default_data(), help="a translation data-bin (joined dictionary)")
    parser.add_argument("--archs", nargs="+", default=["transformer_preln"], help="besides fairseq's transformer")
    parser.add_argument("--precisions", nargs="+", choices=list(PRECISIONS), default=list(PRECISIONS))
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--log-interval", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    args = parser.parse_args(argv)
    if args.data is None:
        parser.error("no data-bin found under data/: give --data")
    import torch  # after argument parsing: --help stays fast

    archs = ["transformer", *(a for a in args.archs if a != "transformer")]
    precisions = ["fp32", *(p for p in args.precisions if p != "fp32")]
    from fairseq_layernorm_plugins.cpu_fp16 import native_fp16_products

    cpu = {"cpu": torch.cpu.get_capabilities().get("cpu_name", "?"), "native_fp16": native_fp16_products()}
    print(
        f"{args.layers}L-{args.layers}L d={args.dim}, {args.data}, torch {torch.__version__}, one thread, "
        f"{cpu['cpu']}, {'with' if cpu['native_fp16'] else 'without'} fp16 arithmetic",
        flush=True,
    )
    seconds = {}
    for arch in archs:
        for precision in precisions:
            seconds[arch, precision] = seconds_per_update(args, arch, precision)
            ratio = seconds[arch, precision] / seconds[BASELINE]
            print(f"{arch:24} {precision:22} {seconds[arch, precision]:7.3f} s/update  {ratio:5.2f}x", flush=True)
    if args.json:
        rows = [{"arch": a, "precision": p, "seconds_per_update": s} for (a, p), s in seconds.items()]
        args.json.write_text(json.dumps({"layers": args.layers, "dim": args.dim, **cpu, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
