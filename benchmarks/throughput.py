#!/usr/bin/env python
"""Training throughput of each method relative to fairseq's own ``transformer`` of the
same shape, measured in one process run with interleaved repetitions:

    python benchmarks/throughput.py [--data data/iwslt14-mini/bin] [--layers 6] [--dim 256] [--reps 15]

One step = forward + backward + fairseq's Adam step (its per-parameter loop, what
``--optimizer adam`` runs without NVIDIA apex) on the same fixed batches for every arch;
each arch also runs with the package's fast paths (row ``ARCH+fast``: ``--fused-attention``
and ``--optimizer adam_foreach``; ``--no-fast`` leaves them out);
target words per second per step; per repetition the archs run in rotated order, each
arch ``--steps`` steps back to back of which the fastest counts (a step slowed by the OS
or another process says nothing about the arch), and each ratio is taken against the
baseline's in the same repetition; the median ratio and its spread (min-max) are
printed, one line per arch, with the issue's target. Also the ratio of matmul FLOPs per
step (exact, unlike the timings), the peak-memory ratio (CUDA: max allocated above what was
allocated before the arch was built, over building it and its warm-up steps, in this process,
after a throw-away step and with the allocator's cache emptied before each arch;
CPU: peak RSS above the RSS before the model was built, in a fresh process per arch) and Admin's
profiling time in updates. CPU by default; ``--device cuda --precision bf16``
(or fp16) on a GPU. ``--json PATH`` also writes these numbers to PATH (what
``scripts/gpu/check.py`` reads).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
BASELINE = "transformer"
TARGETS = {
    "transformer_preln": 0.99,
    "transformer_deepnet": 0.99,
    "transformer_b2t": 0.98,
    "transformer_admin": 0.97,
    "transformer_tfixup": 1.00,
}


FAST_TARGETS = {"cpu": 1.1, "cuda": 1.2}  # ARCH+fast rows


def label(arch, fast):
    return arch + ("+fast" if fast else "")


def model_args(args, arch):
    return [
        "--encoder-layers",
        args.layers,
        "--decoder-layers",
        args.layers,
        "--encoder-embed-dim",
        args.dim,
        "--decoder-embed-dim",
        args.dim,
        "--encoder-ffn-embed-dim",
        args.ffn_dim,
        "--decoder-ffn-embed-dim",
        args.ffn_dim,
        "--encoder-attention-heads",
        args.heads,
        "--decoder-attention-heads",
        args.heads,
        "--share-decoder-input-output-embed",
        "--dropout",
        "0.1",
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--max-tokens",
        args.max_tokens,
    ]


class Bench:
    """One arch (with the fast paths or without): model, criterion, optimizer and fixed batches on the device."""

    def __init__(self, args, arch, fast=False):
        from fairseq import utils

        import fairseq_layernorm_plugins  # noqa: F401
        from fairseq_layernorm_plugins import diagnostics as D

        self.args = args
        from fairseq.optim.adam import Adam

        from fairseq_layernorm_plugins.optim.adam_foreach import ForeachAdam

        fast_flags = ["--fused-attention"] if fast else []
        self.model, self.criterion, task = D.build(args.data, arch, *model_args(args, arch), *fast_flags, seed=1)
        task.load_dataset("train")
        iterator = task.get_batch_iterator(
            dataset=task.dataset("train"), max_tokens=args.max_tokens, seed=1
        ).next_epoch_itr(shuffle=False)
        self.batches = [next(iterator) for _ in range(args.batches)]
        device = torch.device(args.device)
        self.model.to(device)
        if device.type == "cuda":
            self.batches = [utils.move_to_cuda(b) for b in self.batches]
        self.words = sum(int(b["ntokens"]) for b in self.batches)
        self.optimizer = (ForeachAdam if fast else Adam)(self.model.parameters(), lr=1e-4)
        self.sample = self.batches[0]
        self.arch, self.fast = arch, fast

    def step(self):
        """Seconds for forward + backward + optimizer step over the batches."""
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.args.precision)
        self._sync()
        start = time.perf_counter()
        self.model.train()
        self.optimizer.zero_grad()
        for batch in self.batches:
            with torch.autocast(self.args.device, dtype=dtype, enabled=dtype is not None):
                loss, _, _ = self.criterion(self.model, batch)
            loss.backward()
        self.optimizer.step()
        self._sync()
        return time.perf_counter() - start

    def flops(self):
        """FLOPs of one step's forward + backward (torch's FlopCounterMode: matmuls, convs and
        attention kernels; element-wise ops such as LayerNorm count zero). Deterministic, so
        it tells compute added by a method from timing noise."""
        from torch.utils.flop_counter import FlopCounterMode

        counter = FlopCounterMode(display=False)
        with counter:
            self.step()
        return counter.get_total_flops()

    def _sync(self):
        if self.args.device == "cuda":
            torch.cuda.synchronize()


def rss_bytes():
    """This process's resident memory now (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_peak(args):
    """Run in a fresh process on a CPU: peak memory of building ``args.archs[0]`` and two steps,
    in bytes (peak RSS above the RSS before the model was built, sampled every millisecond; a
    CPU process's RSS does not shrink back, so every arch needs a process of its own)."""
    import threading

    base, peak, running = rss_bytes(), [0], [True]

    def sample():
        while running[0]:
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    bench = Bench(args, args.archs[0], fast=args.measure_fast)
    bench.step()
    bench.step()
    running[0] = False
    sampler.join()
    return peak[0] - base


def peak_memory(args, arch, fast=False):
    """:func:`measure_peak` for ``arch`` (with the fast paths or without) in a fresh CPU process."""
    argv = [
        sys.executable,
        __file__,
        "--measure-peak",
        "--data",
        args.data,
        "--layers",
        str(args.layers),
        "--dim",
        str(args.dim),
        "--ffn-dim",
        str(args.ffn_dim),
        "--heads",
        str(args.heads),
        "--batches",
        str(args.batches),
        "--max-tokens",
        str(args.max_tokens),
        "--device",
        args.device,
        "--precision",
        args.precision,
        "--archs",
        arch,
    ] + (["--measure-fast"] if fast else [])
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1])


def build_parser(description=__doc__):
    """The benchmark's options (benchmarks/profile_step.py adds its own)."""
    parser = argparse.ArgumentParser(
        description=description.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default_data = REPO / "data" / "iwslt14-mini" / "bin"
    parser.add_argument(
        "--data",
        default=str(default_data),
        help=f"a data-bin (default: {default_data}; scripts/prepare_iwslt14_mini.py)",
    )
    parser.add_argument("--archs", nargs="+", help="default: every registered method but Post-LN (the baseline's twin)")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--ffn-dim", type=int, help="FFN inner dim (default: 4 x dim)")
    parser.add_argument("--heads", type=int, help="attention heads (default: dim / 64)")
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--batches", type=int, default=2, help="batches per step (default 2)")
    parser.add_argument(
        "--reps",
        type=int,
        default=15,
        help="interleaved repetitions (default 15; on 2 cores the median still moves up to 10%% between runs)",
    )
    parser.add_argument(
        "--steps", type=int, default=1, help="steps per arch and repetition; the fastest counts (default 1)"
    )
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads (default: all cores)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per arch first")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    parser.add_argument("--no-fast", action="store_true", help="leave out the ARCH+fast rows")
    parser.add_argument("--measure-peak", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--measure-fast", action="store_true", help=argparse.SUPPRESS)
    return parser


def parse(argv, parser=None):
    args = (parser or build_parser()).parse_args(argv[1:])
    args.ffn_dim = args.ffn_dim or 4 * args.dim
    args.heads = args.heads or max(1, args.dim // 64)
    if not args.archs:
        from fairseq_layernorm_plugins.methods import METHODS, method_names

        args.archs = [METHODS[name].model for name in method_names() if name != "postln"]
    return args


def main(argv=None):
    parser = build_parser()
    parser.add_argument("--json", metavar="PATH", help="also write the measured numbers to PATH (JSON)")
    args = parse([__file__, *(sys.argv[1:] if argv is None else argv)], parser)
    if args.measure_peak:
        print(measure_peak(args))
        return
    torch.set_num_threads(args.threads)
    variants = [(BASELINE, False)] + [
        (arch, fast) for arch in args.archs for fast in (False, True)[: 1 if args.no_fast else 2]
    ]
    cuda_memory = args.device == "cuda" and not args.no_memory
    if cuda_memory:  # what one process allocates once (cuBLAS workspaces...) is charged to no arch
        Bench(args, BASELINE).step()
    benches, memory = {}, {}
    for arch, fast in variants:
        if cuda_memory:  # what this arch adds to the allocations of those built before it
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # every arch allocates from the same state: no cached blocks
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        bench = benches[label(arch, fast)] = Bench(args, arch, fast)
        for _ in range(max(args.warmup, 2 if cuda_memory else 0)):  # Adam's state exists after the first
            bench.step()
        if cuda_memory:
            memory[label(arch, fast)] = torch.cuda.max_memory_allocated() - before
        print(f"built and warmed up {label(arch, fast)}", flush=True)
    order = list(benches)
    seconds = {arch: [] for arch in order}
    for rep in range(args.reps):
        rotated = order[rep % len(order) :] + order[: rep % len(order)]
        for arch in rotated:
            seconds[arch].append(min(benches[arch].step() for _ in range(args.steps)))
        print(
            f"rep {rep + 1}/{args.reps}: "
            + ", ".join(
                f"{a.replace('transformer_', '')} {benches[a].words / s[-1]:.0f} wps" for a, s in seconds.items()
            ),
            flush=True,
        )
    base_wps = [benches[BASELINE].words / s for s in seconds[BASELINE]]
    print(
        f"\n{args.device} {args.precision}, {args.layers}L-{args.layers}L d={args.dim}, {benches[BASELINE].words} target words/step, "
        f"{args.reps} interleaved reps x best of {args.steps} steps, {args.threads} threads; baseline fairseq transformer {statistics.median(base_wps):.0f} wps"
    )
    flops = {arch: bench.flops() for arch, bench in benches.items()}
    if not args.no_memory and not cuda_memory:
        memory = {label(a, f): peak_memory(args, a, f) for a, f in variants}
    result = {
        **{key: getattr(args, key) for key in ("device", "precision", "layers", "dim", "reps", "steps", "threads")},
        "words_per_step": benches[BASELINE].words,
        "baseline_wps": round(statistics.median(base_wps)),
        "archs": {},  # per ARCH / ARCH+fast: its ratios to the baseline
    }
    for arch, fast in variants[1:]:
        name = label(arch, fast)
        ratios = [benches[name].words / s / b for s, b in zip(seconds[name], base_wps)]
        median = statistics.median(ratios)
        # a method without its own target: no slower than fairseq; the fast paths: issue 17's
        target = FAST_TARGETS[args.device] if fast else TARGETS.get(arch, 1.0)
        row = result["archs"][name] = {
            "speed_ratio": median,
            "spread": [min(ratios), max(ratios)],
            "target": target,
            "met": median >= target,
            "flops_ratio": flops[name] / flops[BASELINE],
            "memory_ratio": memory[name] / memory[BASELINE] if memory else None,
        }
        line = (
            (
                f"{name:27s} speed ratio {median:.4f} (spread {min(ratios):.3f}-{max(ratios):.3f}); target >= {target:.2f}: "
                f"{'met' if row['met'] else 'MISSED'}"
            )
            if target
            else f"{name:27s} speed ratio {median:.3f}"
        )
        line += f"; matmul FLOPs ratio {row['flops_ratio']:.4f}"
        if memory:
            line += f"; peak memory ratio {row['memory_ratio']:.3f}"
        print(line)
    if "transformer_admin" in benches:
        from fairseq_layernorm_plugins.admin_profiling import profile_admin_

        bench = benches["transformer_admin"]
        start = time.perf_counter()
        profile_admin_(bench.model, [bench.sample])
        profile = time.perf_counter() - start
        step = statistics.median(seconds["transformer_admin"]) / args.batches
        result["admin_profiling"] = {"seconds": profile, "updates": profile / step}  # updates of one batch
        print(f"Admin profiling (1 batch): {profile:.3f} s = {profile / step:.2f} updates of one batch")
    if args.json:
        from fairseq_layernorm_plugins.atomic import write_json

        write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
