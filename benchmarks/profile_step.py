#!/usr/bin/env python
"""Where one training step's time goes outside the big matmuls (``torch.profiler``):

    python benchmarks/profile_step.py [--archs transformer transformer_admin] [--fast] [--out docs/profile]

The step is :mod:`throughput`'s (same options, model, batches and optimizer: forward +
backward + fairseq's Adam, or with ``--fast`` the package's fast paths); ``--reps`` steps
are profiled after ``--warmup`` untimed ones. Every operator's self time (its own, without
the operators it calls) goes to the outermost operator it runs in: the op the model or the
loss called in the forward (``aten::linear`` for its ``aten::t`` and ``aten::addmm``), the
autograd node in the backward (``GatherBackward0`` for its ``aten::zeros`` and
``aten::scatter_add_``), the optimizer step; the autograd engine's own frames (gradient
accumulation, freeing) are theirs. Outermost operators are grouped into categories, one
column per arch in per cent of the step's self time, followed by the outermost operators
outside the matmuls that cost most. Writes OUT.md and OUT.json with ``--out``.

On CUDA (``--device cuda``) the same table is made twice: from the host's self time (what
Python, the dispatcher and the kernel launches cost) and from the GPU's kernel time, each kernel
counted to the outermost operator that launched it; the step's wall time beside the GPU's busy
time says whether the step waits on the host (launch-bound) or on the kernels.
"""

import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput  # noqa: E402

OPTIMIZER, OTHER = "optimizer step", "other"
# an outermost operator's category: the first with a stem in its name (lower case, "_" dropped,
# so that forward 'aten::native_layer_norm' and backward 'NativeLayerNormBackward0' agree)
ELEMENTWISE = ("add", "mul", "div", "sub", "relu", "threshold", "sqrt", "pow", "sum", "mean", "neg", "exp")
LAYOUT = ("copy", "contiguous", "clone", "cat", "transpose", "view", "reshape", "permute", "fill", "zero", "empty")
CATEGORIES = (
    ("autograd engine", ("autograd::",)),
    ("embedding / loss", ("logsoftmax", "nllloss", "gather", "embedding", "scatter", "index")),
    ("matmul", ("mm", "matmul", "linear", "scaleddotproduct")),
    ("softmax / attention mask", ("softmax", "maskedfill")),
    ("LayerNorm", ("layernorm",)),
    ("dropout", ("dropout", "bernoulli")),
    ("element-wise", ELEMENTWISE),
    ("copies / layout", LAYOUT + ("ones", "expand", "strided", "select", "slice", "squeeze", "aten::t")),
)


def category(name):
    """The category of operator ``name`` ('aten::addmm', 'AddmmBackward0', ...)."""
    key = name.lower().replace("_", "")
    for cat, stems in CATEGORIES:
        if any(stem in key if stem != "aten::t" else key == stem for stem in stems):
            return cat
    return OTHER


def root_operator(event):
    """The outermost operator ``event`` runs in (OPTIMIZER inside the optimizer's step; the
    autograd engine's frames are their own root)."""
    node = event
    while node.cpu_parent is not None:
        parent = node.cpu_parent
        if parent.name == OPTIMIZER:
            return OPTIMIZER
        if parent.name.startswith(("autograd::engine", "ProfilerStep")):
            break
        node = parent
    return node.name


def profile_step(bench, steps):
    """({outermost operator: self CPU microseconds}, {outermost operator: GPU kernel
    microseconds} (empty off CUDA), wall microseconds), summed over ``steps`` of ``bench``'s steps."""
    cuda = bench.args.device == "cuda"
    original = bench.optimizer.step

    def labelled_step(*args, **kwargs):
        with record_function(OPTIMIZER):
            return original(*args, **kwargs)

    bench.optimizer.step = labelled_step
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    try:
        with profile(activities=activities) as prof:
            start = time.perf_counter()
            for _ in range(steps):
                bench.step()  # synchronises the device at its end
            wall = (time.perf_counter() - start) * 1e6
    finally:
        bench.optimizer.step = original
    host, device = defaultdict(float), defaultdict(float)
    for event in prof.events():
        if event.name == OPTIMIZER or event.device_type != DeviceType.CPU:
            continue  # kernels are counted through the operator that launched them
        root = root_operator(event)
        host[root] += event.self_cpu_time_total
        if cuda:
            device[root] += event.self_device_time_total
    return dict(host), dict(device), wall


def summarize(roots, steps):
    """({category: per cent}, step milliseconds, [(operator, per cent)] of the 8 costliest
    outermost operators outside the matmuls)."""
    total = sum(roots.values())
    shares = defaultdict(float)
    for root, t in roots.items():
        shares[OPTIMIZER if root == OPTIMIZER else category(root)] += 100 * t / total
    outside = sorted(((r, 100 * t / total) for r, t in roots.items() if category(r) != "matmul"), key=lambda x: -x[1])
    return dict(shares), total / 1000 / steps, outside[:8]


def table(results, key, what):
    """One Markdown table: ``results[arch][key]`` as categories (rows) by arch (columns)."""
    names = list(results)
    order = [OPTIMIZER] + [c for c, _ in CATEGORIES] + [OTHER]
    lines = [f"| share of the step's {what} | {' | '.join(names)} |", "|---|" + "---|" * len(names)]
    for cat in order:
        lines.append(f"| {cat} | " + " | ".join(f"{results[n][key]['shares'].get(cat, 0):.1f} %" for n in names) + " |")
    lines.append(f"| {what} per step | " + " | ".join(f"{results[n][key]['step_ms']:.1f} ms" for n in names) + " |")
    lines += ["", f"Costliest outermost operators outside the matmuls ({what}, per cent of the step):", ""]
    for n in names:
        lines.append(f"- {n}: " + ", ".join(f"`{op}` {share:.1f} %" for op, share in results[n][key]["top"]))
    return lines


def markdown(args, results):
    """The table(s) and the top operators, as Markdown."""
    lines = [
        f"{args.device} {args.precision}, {args.layers}L-{args.layers}L d={args.dim} FFN {args.ffn_dim} "
        f"{args.heads} heads, {args.batches} batches of <= {args.max_tokens} tokens per step, "
        f"{args.threads} threads, {args.reps} profiled steps",
        "",
        *table(results, "host", "host self time"),
    ]
    if args.device == "cuda":
        names = list(results)
        lines += ["", *table(results, "device", "GPU kernel time"), ""]
        lines.append("| per step | " + " | ".join(names) + " |")
        lines.append("|---|" + "---|" * len(names))
        lines.append("| wall time | " + " | ".join(f"{results[n]['wall_ms']:.1f} ms" for n in names) + " |")
        busy = [results[n]["device"]["step_ms"] / results[n]["wall_ms"] for n in names]
        lines.append("| GPU busy | " + " | ".join(f"{100 * b:.0f} %" for b in busy) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    from fairseq_layernorm_plugins.atomic import write_json, write_text

    parser = throughput.build_parser(__doc__)
    parser.add_argument("--fast", action="store_true", help="profile the ARCH+fast variants (the package's fast paths)")
    parser.add_argument("--out", help="write OUT.md and OUT.json")
    parser.set_defaults(reps=3, archs=["transformer"])
    args = throughput.parse([__file__, *(sys.argv[1:] if argv is None else argv)], parser)
    torch.set_num_threads(args.threads)
    results = {}
    for arch in args.archs:
        bench = throughput.Bench(args, arch, fast=args.fast)
        for _ in range(args.warmup):
            bench.step()
        host, device, wall = profile_step(bench, args.reps)
        result = {"wall_ms": wall / 1000 / args.reps}
        for key, roots in (("host", host), ("device", device)):
            if roots:
                shares, step_ms, top = summarize(roots, args.reps)
                result[key] = {"shares": shares, "step_ms": step_ms, "top": top}
        results[throughput.label(arch, args.fast)] = result
        gpu = f", {result['device']['step_ms']:.1f} ms GPU kernels" if device else ""
        print(
            f"{arch}: {result['host']['step_ms']:.0f} ms host self time, {result['wall_ms']:.1f} ms wall{gpu} per step",
            flush=True,
        )
    text = markdown(args, results)
    print(text)
    if args.out:
        write_text(Path(args.out).with_suffix(".md"), text)
        write_json(Path(args.out).with_suffix(".json"), results)
    return results


if __name__ == "__main__":
    main()
