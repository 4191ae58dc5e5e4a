"""The stability grid's report (``scripts/stability_grid.py``): method x (depth, lr, warm-up)
cells as a Markdown table and a heat map of the final validation NLL."""

from pathlib import Path

from fairseq_layernorm_plugins.atomic import write_text
from fairseq_layernorm_plugins.experiments.figures import pyplot, save_figure


def grid_progress(key, cell):
    """The line printed when a stability-grid cell ends (``key``: method, depth, lr, warm-up)."""
    return (
        f"{key}: {cell['status']}, valid NLL {cell['valid_nll']:.2f}, BLEU {cell['bleu']:.2f} ({cell['minutes']} min)"
    )


def grid_report(cells, commands, out, unigram):
    """OUT.md (methods x (depth, lr, warm-up): final validation NLL / test BLEU, the status
    where not trained; the hand-written sections of an earlier OUT.md, from its first "## "
    heading on, are kept) and
    OUT.png (heat map of the final validation NLL); ``unigram``: the stall threshold in bits."""
    import numpy as np

    from fairseq_layernorm_plugins.methods import method_names

    plt = pyplot()
    columns = sorted(
        {(c["depth"], c["lr"], c["warmup"]) for c in cells}, key=lambda k: (int(k[0].split("L")[0]), k[2] == 0, k[1])
    )
    order = method_names()
    methods = sorted({c["method"] for c in cells}, key=lambda m: order.index(m) if m in order else len(order))
    by = {(c["method"], c["depth"], c["lr"], c["warmup"]): c for c in cells}
    header = ["method"] + [f"{d} lr {lr:g} {'warm-up' if w else 'no warm-up'}" for d, lr, w in columns]
    lines = [
        "# CPU-scale stability grid",
        "",
        "Made by:",
        "",
        *[f"    {c}" for c in commands],
        "",
        "Each cell: final validation NLL (bits per token) / tokenised BLEU on the test lines "
        f"(greedy). **diverged** = NaN/inf; **stalled** = not below the unigram entropy of the training targets "
        f"({unigram:.2f} bits).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    grid = np.full((len(methods), len(columns)), np.nan)
    for i, method in enumerate(methods):
        row = [method]
        for j, key in enumerate(columns):
            cell = by.get((method, *key))
            if cell is None:
                row.append("")
                continue
            grid[i, j] = cell["valid_nll"] if cell["status"] != "diverged" else np.nan
            row.append(
                ("" if cell["status"] == "trained" else f"**{cell['status']}** ")
                + f"{cell['valid_nll']:.2f} / {cell['bleu']:.2f}"
            )
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", f"![final validation NLL per cell]({Path(out).name}.png)"]
    previous = Path(f"{out}.md").read_text() if Path(f"{out}.md").exists() else ""
    written = previous[previous.index("\n## ") :] if "\n## " in previous else ""  # hand-written sections, kept
    write_text(f"{out}.md", "\n".join(lines) + "\n" + written)
    fig, ax = plt.subplots(figsize=(1.3 * len(columns) + 2, 0.5 * len(methods) + 2))
    image = ax.imshow(grid, cmap="viridis_r", aspect="auto")
    for i, method in enumerate(methods):
        for j, key in enumerate(columns):
            cell = by.get((method, *key))
            if cell is not None:
                ax.text(
                    j,
                    i,
                    "X"
                    if cell["status"] == "diverged"
                    else f"{cell['valid_nll']:.2f}" + ("\nstalled" if cell["status"] == "stalled" else ""),
                    ha="center",
                    va="center",
                    color="white" if cell["status"] == "trained" else "red",
                    fontsize=7,
                )
    ax.set_xticks(
        range(len(columns)), [f"{d}\nlr {lr:g}\n{'wu' if w else 'no wu'}" for d, lr, w in columns], fontsize=7
    )
    ax.set_yticks(range(len(methods)), methods)
    fig.colorbar(image, label="final validation NLL, bits (X = diverged)")
    ax.set_title("stability grid: final validation NLL")
    save_figure(fig, f"{out}.png")
