#!/usr/bin/env python
"""Train very deep models without warm-up and compare their training loss curves.

Default: 50L-50L at d=64 on the toy reversal task (made here), T-Fixup against
fairseq's Post-LN ``transformer`` of the same shape, Adam (0.9, 0.98), no warm-up
(``inverse_sqrt_nowarmup``), a few hundred updates. T-Fixup's claim (Huang et al.
2020, Sec. 4) is that it trains at such depths without LayerNorm or warm-up, where
Post-LN does not. Writes ``<out>/curves.json`` (loss per update per arch) and
``<out>/curves.png``, and prints a summary line per arch.
"""

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def train_curve(data_bin, arch, args, save_dir):
    """Run fairseq-train; return the training loss logged at every update (nan if it blew up)."""
    from fairseq_layernorm_plugins.experiments.curves import log_record

    cmd = [
        BIN / "fairseq-train",
        data_bin,
        "--user-dir",
        REPO / "fairseq_layernorm_plugins",
        "--arch",
        arch,
        "--encoder-layers",
        args.layers,
        "--decoder-layers",
        args.layers,
        "--encoder-embed-dim",
        args.dim,
        "--decoder-embed-dim",
        args.dim,
        "--encoder-ffn-embed-dim",
        2 * args.dim,
        "--decoder-ffn-embed-dim",
        2 * args.dim,
        "--encoder-attention-heads",
        4,
        "--decoder-attention-heads",
        4,
        "--dropout",
        0.0,
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9, 0.98)",
        "--lr",
        args.lr,
        "--clip-norm",
        0,
        "--lr-scheduler",
        "inverse_sqrt_nowarmup",
        "--decay-period",
        4000,
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        0.1,
        "--max-tokens",
        args.max_tokens,
        "--max-update",
        args.max_update,
        "--seed",
        args.seed,
        "--cpu",
        "--save-dir",
        save_dir,
        "--no-save",
        "--disable-validation",
        "--log-format",
        "json",
        "--log-interval",
        1,
        "--no-progress-bar",
    ]
    print("$ " + " ".join(map(str, cmd)), flush=True)
    proc = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    losses, tail = [], []
    for line in proc.stdout:
        tail = (tail + [line])[-20:]
        parsed = log_record(line)
        if parsed and parsed[0] == "train_inner":
            record = parsed[1]
            losses.append(float(record["loss"]))
            if len(losses) % 50 == 0:
                print(f"  [{arch}] update {len(losses)}: loss {losses[-1]:.3f}", flush=True)
    proc.wait()
    if proc.returncode and len(losses) < args.max_update:
        # fairseq stops on NaN/inf loss ("Fatal error: gradients are inconsistent" or
        # FloatingPointError): record the divergence instead of failing the comparison
        print(f"  [{arch}] stopped after {len(losses)} updates:\n" + "".join(tail[-5:]), flush=True)
        losses += [math.nan] * (args.max_update - len(losses))
    return losses


def summarize(losses):
    finite = [x for x in losses if math.isfinite(x)]
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    status = "diverged" if len(finite) < len(losses) else ("trains" if last < first - 1.0 else "stalls")
    lowest = round(min(finite), 3) if finite else math.nan  # NaN from the first update on: diverged at once
    return {"first10": round(first, 3), "last10": round(last, 3), "min": lowest, "status": status}


def plot(curves, path, title):
    from fairseq_layernorm_plugins.experiments.figures import pyplot, save_figure

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    for arch, losses in curves.items():
        ax.plot(range(1, len(losses) + 1), losses, label=arch)
    ax.set_xlabel("update")
    ax.set_ylabel("training loss (label-smoothed, base 2)")
    ax.set_title(title)
    ax.legend()
    save_figure(fig, path, dpi=120)


def main(argv=None):
    from fairseq_layernorm_plugins.atomic import write_json

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", default="transformer_tfixup,transformer", help="comma-separated fairseq archs")
    parser.add_argument("--layers", type=int, default=50, help="encoder and decoder layers (default 50)")
    parser.add_argument("--dim", type=int, default=64, help="embedding dim; FFN is 2x (default 64)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--max-update", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data", help="a fairseq data-bin (default: the toy reversal task, made here)")
    parser.add_argument("--out", default=str(REPO / "runs" / "depth_stability"))
    args = parser.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        data_bin = args.data
        if data_bin is None:
            from fairseq_layernorm_plugins.prepare.textio import fairseq_preprocess
            from fairseq_layernorm_plugins.prepare.toy import write_reversal_task

            write_reversal_task(tmp)
            data_bin = Path(tmp) / "bin"
            fairseq_preprocess(Path(tmp) / "train", Path(tmp) / "valid", Path(tmp) / "test", data_bin, "src", "tgt")
        curves, summary = {}, {}
        for arch in args.archs.split(","):
            start = time.time()
            curves[arch] = train_curve(data_bin, arch, args, Path(tmp) / arch)
            summary[arch] = {**summarize(curves[arch]), "minutes": round((time.time() - start) / 60, 1)}
            print(f"{arch}: {summary[arch]}", flush=True)

    settings = {k: v for k, v in vars(args).items() if k not in ("out",)}
    write_json(out / "curves.json", {"settings": settings, "summary": summary, "curves": curves}, indent=None)
    plot(curves, out / "curves.png", f"{args.layers}L-{args.layers}L, d={args.dim}, lr {args.lr}, no warm-up")
    print(f"wrote {out / 'curves.json'} and {out / 'curves.png'}")
    return summary


if __name__ == "__main__":
    main()
