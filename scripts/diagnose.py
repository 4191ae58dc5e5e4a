#!/usr/bin/env python
"""The papers' diagnostics at initialisation for several archs and depths, and of trained
checkpoints, on real batches of a data-bin (see fairseq_layernorm_plugins/diagnostics.py),
as JSON + PNG:

    python scripts/diagnose.py data/iwslt14-mini/bin --out docs/diagnostics \\
        --archs transformer_postln_iwslt_de_en transformer_preln_iwslt_de_en transformer_admin_iwslt_de_en \\
        --depths 2 6 12 24 -- --encoder-embed-dim 64 --decoder-embed-dim 64 ...
    python scripts/diagnose.py data/multi30k.de-en/bin --out runs/diag-trained \\
        --checkpoints admin=runs/claims/admin/admin_radam/checkpoints/checkpoint_last.pt \\
        preln=runs/claims/admin/preln_radam/checkpoints/checkpoint_last.pt

OUT/diagnostics.json, OUT/grad_norms.png (FFN fc2 gradient norm per layer, deepest
model), OUT/output_change.png (vs depth: one Adam update and random perturbation),
OUT/dependency.png (beta_ii per sub-layer, deepest model), OUT/cosine.png (layer-output
cosine similarity, deepest model); the JSON also holds Admin's omega per sub-layer (mean, min,
max over channels), the batch's NLL in bits and the RMS of the decoder's output. Arguments
after ``--`` go to every model built at initialisation (fairseq flags); a checkpoint keeps
the options it was trained with.
"""

import argparse
import shlex
import sys
from pathlib import Path


def diagnose(model, criterion, sample, seed, lr):
    """Every diagnostic of ``model`` on ``sample`` (see fairseq_layernorm_plugins/diagnostics.py)."""
    from fairseq_layernorm_plugins import diagnostics as D

    norms = D.grad_norms(model, criterion, sample)
    return {
        "ffn_grad_norm": {stack: D.ffn_grad_norms(norms, stack) for stack in ("encoder", "decoder")},
        "output_change_adam": D.output_change(model, criterion, sample, "adam", lr=lr),
        "output_change_adam_relative": D.output_change(model, criterion, sample, "adam", lr=lr, relative=True),
        "output_change_random": D.output_change(model, criterion, sample, "random", seed=seed),
        "dependency": D.dependency(model, sample),
        "cosine": D.layer_cosine(model, sample),
        "omega": D.omega_summary(model),  # Admin's; {} for other archs
        **D.loss_and_scale(model, sample),  # nll_bits, output_rms
    }


def measure(data_bin, archs, depths, model_args, sentences, seed, lr, checkpoints=(), max_tokens=2048):
    """{name: {depth: diagnostics}}: each arch at each depth at initialisation, and each
    (label, path) of ``checkpoints`` as trained (its depth from its own options). A model at
    initialisation is built as ``fairseq-train --seed SEED --max-tokens MAX_TOKENS MODEL_ARGS``
    builds it, Admin's omega profiled on that run's first training batches."""
    import fairseq_layernorm_plugins  # noqa: F401  (registers the archs)
    from fairseq_layernorm_plugins import diagnostics as D

    def models():
        for arch in archs:
            for depth in depths:
                # the weights and Admin's profiling batches both come from the last --seed given
                model, criterion, task = D.build(
                    data_bin, arch, "--seed", seed, "--max-tokens", max_tokens, *model_args,
                    "--encoder-layers", depth, "--decoder-layers", depth,
                )  # fmt: skip
                D.prepare_model(model, task)  # Admin: profiled as fairseq-train would, on training batches
                yield arch, model, criterion, D.sample_batch(task, sentences=sentences)
        for label, path in checkpoints:
            model, criterion, task = D.load(data_bin, path)
            yield label, model, criterion, D.sample_batch(task, sentences=sentences)

    results = {}
    for name, model, criterion, sample in models():
        depth = len(model.encoder.layers)
        result = results.setdefault(name, {})[depth] = diagnose(model, criterion, sample, seed, lr)
        print(
            f"{name} {depth}L-{len(model.decoder.layers)}L: output change (Adam) {result['output_change_adam']:.3f}, "
            f"decoder top fc2 grad norm {result['ffn_grad_norm']['decoder'][-1]:.3f}",
            flush=True,
        )
    return results


def plot(results, out):
    from fairseq_layernorm_plugins.experiments.figures import distinct_colours, pyplot, save_figure

    plt = pyplot()
    archs = list(results)
    colour = dict(zip(archs, distinct_colours(len(archs))))
    deepest = {arch: max(results[arch], key=int) for arch in archs}
    figures = {}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, stack in zip(axes, ("encoder", "decoder")):
        for arch in archs:
            values = results[arch][deepest[arch]]["ffn_grad_norm"][stack]
            ax.plot(range(1, len(values) + 1), values, marker="o", label=arch, color=colour[arch])
        ax.set(
            xlabel=f"{stack} layer",
            ylabel="|grad fc2.weight|",
            title=f"{stack} FFN gradient norm",
            yscale="log",
        )
    axes[0].legend(fontsize=7)
    figures["grad_norms"] = fig
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, key, title in zip(
        axes,
        ("output_change_adam", "output_change_adam_relative", "output_change_random"),
        ("one Adam update", "one Adam update, relative to |F|^2", "random perturbation"),
    ):
        for arch in archs:
            depths = sorted(results[arch], key=int)
            ax.plot(
                [int(d) for d in depths],
                [results[arch][d][key] for d in depths],
                marker="o",
                label=arch,
                color=colour[arch],
            )
        ax.set(xlabel="layers (N-N)", ylabel="|F(x,W) - F(x,W*)|^2 per token", title=title)
    axes[0].legend(fontsize=7)
    figures["output_change"] = fig
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, stack in zip(axes, ("encoder", "decoder")):
        for arch in archs:
            values = results[arch][deepest[arch]]["dependency"][stack]
            ax.plot(range(1, len(values) + 1), values, marker=".", label=arch, color=colour[arch])
        ax.set(
            xlabel=f"{stack} sub-layer",
            ylabel="beta_ii",
            title=f"{stack}: dependency on own residual branch",
            ylim=(0, 1.05),
        )
    axes[0].legend(fontsize=7)
    figures["dependency"] = fig
    fig, axes = plt.subplots(1, len(archs), figsize=(3.2 * len(archs), 3.2))
    for ax, arch in zip(axes if len(archs) > 1 else [axes], archs):
        ax.imshow(results[arch][deepest[arch]]["cosine"]["encoder"], vmin=0, vmax=1, cmap="viridis", origin="lower")
        ax.set(title=arch.replace("_iwslt_de_en", ""), xlabel="encoder layer", ylabel="encoder layer")
    figures["cosine"] = fig
    for name, fig in figures.items():
        save_figure(fig, Path(out) / f"{name}.png")


def label_path(item):
    """``LABEL=PATH`` -> (label, path)."""
    label, sep, path = item.partition("=")
    if not (label and sep and path):
        raise argparse.ArgumentTypeError(f"{item!r} is not LABEL=PATH")
    return label, path


def parse(argv):
    """(args, model arguments after ``--``)."""
    model_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("data_bin")
    parser.add_argument(
        "--archs", nargs="+", help="default: every registered method at IWSLT14 size (none with --checkpoints)"
    )
    parser.add_argument(
        "--checkpoints",
        nargs="+",
        default=[],
        type=label_path,
        metavar="LABEL=PATH",
        help="trained fairseq checkpoints to measure as they are (with their own options)",
    )
    parser.add_argument("--depths", nargs="+", type=int, default=[2, 6, 12])
    parser.add_argument("--sentences", type=int, default=32, help="validation sentences in the batch (default 32)")
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate of the one-update output change")
    parser.add_argument("--seed", type=int, default=1, help="the models' seed, as fairseq-train's --seed")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=2048,
        help="fairseq-train's --max-tokens, the batches Admin is profiled on at initialisation (default 2048, the claims')",
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if not args.archs and not args.checkpoints:
        from fairseq_layernorm_plugins.methods import METHODS, method_names

        args.archs = [METHODS[name].arch("_iwslt_de_en") for name in method_names()]
    return args, model_args


def main(argv=None):
    from fairseq_layernorm_plugins.atomic import write_json

    argv = sys.argv[1:] if argv is None else argv
    args, model_args = parse(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    results = measure(
        args.data_bin,
        args.archs or [],
        args.depths,
        model_args,
        args.sentences,
        args.seed,
        args.lr,
        args.checkpoints,
        args.max_tokens,
    )
    write_json(
        Path(args.out) / "diagnostics.json",
        {"command": shlex.join(["python", "scripts/diagnose.py", *argv]), "results": results},
    )
    plot(results, args.out)
    print(f"wrote {args.out}/diagnostics.json and grad_norms / output_change / dependency / cosine .png")


if __name__ == "__main__":
    main()
