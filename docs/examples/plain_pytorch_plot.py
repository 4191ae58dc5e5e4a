"""docs/plain_pytorch.png: each method's training perplexity, through the core example and
through fairseq-train, from the logs of plain_pytorch_measure.sh (runs/plain_pytorch/)."""

import argparse
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CORE = re.compile(r"^update (\d+) \| loss [\d.]+ \| ppl ([\d.]+)")
FAIRSEQ = re.compile(r"train_inner .*ppl=([\d.]+).*num_updates=(\d+),")
VALID = (re.compile(r"valid ppl ([\d.]+)"), re.compile(r"valid on 'valid' subset .*\| ppl ([\d.]+)"))


def curve(log, side):
    """[(update, training ppl)] and the final validation ppl of one log."""
    points, valid = [], None
    for line in log.read_text().splitlines():
        if side == "core" and (m := CORE.search(line)):
            points.append((int(m[1]), float(m[2])))
        elif side == "fairseq" and (m := FAIRSEQ.search(line)):
            points.append((int(m[2]), float(m[1])))
        if m := VALID[side == "fairseq"].search(line):
            valid = float(m[1])
    return points, valid


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--logs", default="runs/plain_pytorch")
    parser.add_argument("--methods", default="preln,b2t,admin,deepnet")
    parser.add_argument("--out", default="docs/plain_pytorch.png")
    args = parser.parse_args()
    methods = args.methods.split(",")
    fig, axes = plt.subplots(1, len(methods), figsize=(3.2 * len(methods), 3.2), sharey=True)
    for ax, method in zip(axes, methods):
        for side, style in (("core", "-"), ("fairseq", "--")):
            points, valid = curve(Path(args.logs) / f"{side}_{method}.log", side)
            label = f"{side}: valid {valid:.1f}" if valid else side
            ax.plot(*zip(*points), style, marker="o", markersize=3, label=label)
        ax.set(title=method, xlabel="update", yscale="log")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("training perplexity")
    fig.suptitle("WikiText-2, 4 layers d 128: core example vs fairseq-train (seed 1, 2 CPU cores)", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(args.out)


if __name__ == "__main__":
    main()
