#!/usr/bin/env python
"""Where one training step's time goes outside the big matmuls (``torch.profiler``, CPU):

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
"""

import sys
from collections import defaultdict
from pathlib import Path

import torch
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
    """{outermost operator: self CPU microseconds} summed over ``steps`` of ``bench``'s steps."""
    original = bench.optimizer.step

    def labelled_step(*args, **kwargs):
        with record_function(OPTIMIZER):
            return original(*args, **kwargs)

    bench.optimizer.step = labelled_step
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                bench.step()
    finally:
        bench.optimizer.step = original
    by_root = defaultdict(float)
    for event in prof.events():
        if event.name != OPTIMIZER:
            by_root[root_operator(event)] += event.self_cpu_time_total
    return dict(by_root)


def summarize(roots, steps):
    """({category: per cent}, step milliseconds, [(operator, per cent)] of the 8 costliest
    outermost operators outside the matmuls)."""
    total = sum(roots.values())
    shares = defaultdict(float)
    for root, t in roots.items():
        shares[OPTIMIZER if root == OPTIMIZER else category(root)] += 100 * t / total
    outside = sorted(((r, 100 * t / total) for r, t in roots.items() if category(r) != "matmul"), key=lambda x: -x[1])
    return dict(shares), total / 1000 / steps, outside[:8]


def markdown(args, results):
    """The table and the top operators, as Markdown."""
    names = list(results)
    order = [OPTIMIZER] + [c for c, _ in CATEGORIES] + [OTHER]
    lines = [
        f"{args.device} {args.precision}, {args.layers}L-{args.layers}L d={args.dim} FFN {args.ffn_dim} "
        f"{args.heads} heads, {args.batches} batches of <= {args.max_tokens} tokens per step, "
        f"{args.threads} threads, {args.reps} profiled steps",
        "",
        f"| share of the step's self time | {' | '.join(names)} |",
        "|---|" + "---|" * len(names),
    ]
    for cat in order:
        lines.append(f"| {cat} | " + " | ".join(f"{results[n]['shares'].get(cat, 0):.1f} %" for n in names) + " |")
    lines.append("| step (profiled) | " + " | ".join(f"{results[n]['step_ms']:.0f} ms" for n in names) + " |")
    lines += ["", "Costliest outermost operators outside the matmuls (per cent of the step):", ""]
    for n in names:
        lines.append(f"- {n}: " + ", ".join(f"`{op}` {share:.1f} %" for op, share in results[n]["top"]))
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
        shares, step_ms, top = summarize(profile_step(bench, args.reps), args.reps)
        results[throughput.label(arch, args.fast)] = {"shares": shares, "step_ms": step_ms, "top": top}
        print(f"{arch}: {step_ms:.0f} ms self CPU time per step", flush=True)
    text = markdown(args, results)
    print(text)
    if args.out:
        write_text(Path(args.out).with_suffix(".md"), text)
        write_json(Path(args.out).with_suffix(".json"), results)
    return results


if __name__ == "__main__":
    main()
