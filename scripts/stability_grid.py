#!/usr/bin/env python
"""CPU-scale stability grid (Admin Fig. 10 / Table 2, B2T Table 1, scaled down): methods x
depth x peak lr x warm-up on/off, a fixed update budget each, on IWSLT14-mini.

    python scripts/stability_grid.py --jobs 2

Each cell trains the method's IWSLT14-mini recipe (configs/iwslt14_mini/) at the cell's
depth and width with Adam (0.9, 0.98) (``--optimizer radam``: RAdam, Admin's optimizer) and either inverse-sqrt warm-up (``--warmups``
updates) or none (constant lr), then decodes ``--test-lines`` test lines greedily. A cell is
"diverged" when the loss became NaN/inf, "stalled" when the final validation NLL is not
below the unigram entropy of the training targets (the model learned word frequencies
at most), otherwise "trained". Writes OUT.json (per cell: status, final validation NLL, BLEU), OUT.md
(table + the command) and OUT.png (heat map of the final validation NLL).

Resumable: cells already in OUT.json are kept, so further invocations add cells to the same
grid; OUT.json records the budget (updates, tokens, width, seed, test lines) and a run with
another budget is refused. ``--jobs N`` trains N cells at once with cores / N threads each
(two single-thread cells on 2 cores take as long per cell as one two-thread cell).
"""

import argparse
import json
import math
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET = ("updates", "max_tokens", "width", "seed", "test_lines", "optimizer")  # what makes two grids' cells comparable


def cell_recipe(method, depth, lr, warmup, updates, width, max_tokens, optimizer="adam"):
    from fairseq_layernorm_plugins.recipes.config import Recipe, load_recipe, merge

    recipe = load_recipe(f"iwslt14_mini/{method}")
    schedule = (
        {"_name": "inverse_sqrt", "warmup_updates": warmup, "warmup_init_lr": 1e-7} if warmup else {"_name": "fixed"}
    )
    data = merge(
        recipe.data,
        {
            "depths": {depth: {}},
            "tokens_per_update": max_tokens,
            "generate": {"beam": 1, "average_last": 1, "extra": ["--max-len-a", "1.5", "--max-len-b", "10"]},
            "fairseq": {
                # the same for every method (a recipe's own optimizer is replaced whole when its name differs)
                "optimizer": {"_name": optimizer, "adam_betas": "(0.9, 0.98)", "weight_decay": 0.0001},
                "lr_scheduler": schedule,
                "optimization": {"lr": [lr], "max_update": updates},
                "dataset": {"max_tokens": max_tokens},
                "model": {
                    "encoder_embed_dim": width,
                    "decoder_embed_dim": width,
                    "encoder_ffn_embed_dim": 2 * width,
                    "decoder_ffn_embed_dim": 2 * width,
                    "encoder_attention_heads": 4,
                    "decoder_attention_heads": 4,
                },
                "checkpoint": {"no_save": False},
                "common": {"log_interval": 10},
            },
        },
    )
    return Recipe(recipe.name, recipe.path, data).with_depth(depth)


def run_cell(method, depth, lr, warmup, args):
    from fairseq_layernorm_plugins.recipes.evaluate import evaluate
    from fairseq_layernorm_plugins.recipes.launch import Launch, data_bin, train
    from fairseq_layernorm_plugins.recipes.report import read_log_curves, unigram_bits

    recipe = cell_recipe(method, depth, lr, warmup, args.updates, args.width, args.max_tokens, args.optimizer)
    run_dir = Path(args.runs) / f"{method}.{depth}.lr{lr:g}.{'warmup' if warmup else 'nowarmup'}"
    launch = Launch(
        recipe,
        str(data_bin(args.data, recipe, REPO)),
        str(run_dir / "checkpoints"),
        cpu_workers=1,
        seed=args.seed,
        extra=["--no-epoch-checkpoints", "--validate-interval-updates", str(args.updates), "--no-progress-bar"],
    )
    cell = {"method": method, "depth": depth, "lr": lr, "warmup": warmup}
    shutil.rmtree(run_dir, ignore_errors=True)  # a cell not in OUT.json was interrupted: start it afresh
    start = time.time()
    try:
        train(launch, run_dir)
        curves = read_log_curves(run_dir / "train.log")
        valid = curves["valid"][-1]["nll_loss"] if curves["valid"] else float("nan")
        bleu = evaluate(run_dir, echo=lambda *a: None)["bleu"]["tokenized"]["score"]
    except RuntimeError as err:  # fairseq stops on NaN/inf losses ("Minimum loss scale", FloatingPointError)
        curves, valid, bleu = {"train": []}, float("nan"), 0.0
        cell["error"] = str(err).splitlines()[0]
    status = "diverged" if not math.isfinite(valid) else "stalled" if valid >= unigram_bits(args.data) else "trained"
    cell.update(
        status=status,
        valid_nll=valid,
        bleu=bleu,
        minutes=round((time.time() - start) / 60, 2),
        train_loss=[p["loss"] for p in curves["train"]],
    )
    return cell


def render(cells, commands, out, data):
    from fairseq_layernorm_plugins.atomic import atomic_path, write_text
    from fairseq_layernorm_plugins.recipes.report import pyplot, unigram_bits

    plt = pyplot()
    import numpy as np

    columns = sorted(
        {(c["depth"], c["lr"], c["warmup"]) for c in cells}, key=lambda k: (int(k[0].split("L")[0]), k[2] == 0, k[1])
    )
    from fairseq_layernorm_plugins.methods import method_names

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
        f"({unigram_bits(data):.2f} bits).",
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
    previous = Path(f"{out}.md").read_text() if Path(f"{out}.md").exists() else ""
    findings = previous[previous.index("\n## Findings") :] if "\n## Findings" in previous else ""  # hand-written, kept
    write_text(f"{out}.md", "\n".join(lines) + "\n" + findings)
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
    fig.tight_layout()
    with atomic_path(f"{out}.png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)


def main():
    from fairseq_layernorm_plugins.atomic import write_json

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iwslt-dir", default=str(REPO.parent / "shared" / "data" / "iwslt14"))
    parser.add_argument("--data", default=str(REPO / "data" / "iwslt14-mini-grid"))
    parser.add_argument("--runs", default=str(REPO / "runs" / "stability-grid"))
    parser.add_argument("--out", default=str(REPO / "docs" / "stability_grid"), help="writes OUT.md, OUT.png, OUT.json")
    parser.add_argument("--methods", nargs="+", help="default: every registered method with an iwslt14_mini recipe")
    parser.add_argument("--depths", nargs="+", default=["6L-6L", "18L-18L"])
    parser.add_argument("--lrs", nargs="+", type=float, default=[1e-3, 2e-3])
    parser.add_argument(
        "--warmups", nargs="+", type=int, default=[0, 60], help="warm-up updates; 0 = none (default: 0 60)"
    )
    parser.add_argument("--updates", type=int, default=300, help="updates per cell (default 300)")
    parser.add_argument("--max-tokens", type=int, default=1024, help="tokens per update (default 1024)")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument(
        "--test-lines", type=int, default=100, help="evenly spaced test lines decoded per cell (default 100)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--optimizer",
        choices=("adam", "radam"),
        default="adam",
        help="every cell's optimizer, betas (0.9, 0.98) (default adam)",
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="cells trained at once, each with cores / JOBS threads (default 1)"
    )
    args = parser.parse_args()
    if not args.methods:
        from fairseq_layernorm_plugins.methods import method_names

        args.methods = method_names("iwslt14_mini")

    from fairseq_layernorm_plugins.prepare.iwslt14_mini import prepare

    prepare(args.iwslt_dir, args.data, test_lines=args.test_lines)
    results = Path(f"{args.out}.json")
    budget = {name: getattr(args, name) for name in BUDGET}
    previous = json.loads(results.read_text()) if results.exists() else {"commands": [], "budget": budget, "cells": []}
    previous["budget"].setdefault("optimizer", "adam")  # grids made before --optimizer existed
    if previous.get("budget") != budget:
        sys.exit(
            f"error: {results} holds cells made with {previous.get('budget')}, not {budget}; use another --out or remove it"
        )
    done = {(c["method"], c["depth"], c["lr"], c["warmup"]): c for c in previous["cells"]}
    command = "python scripts/stability_grid.py " + " ".join(sys.argv[1:])
    commands = previous["commands"] + [command] if command not in previous["commands"] else previous["commands"]
    keys = [(m, d, lr, w) for d in args.depths for w in args.warmups for lr in args.lrs for m in args.methods]
    todo = sorted((key for key in keys if key not in done), key=lambda key: -int(key[1].split("L")[0]))  # deepest first
    print(
        f"{len(keys) - len(todo)} of {len(keys)} cells already in {results}; running {len(todo)} with {args.jobs} at once",
        flush=True,
    )
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.jobs)))  # inherited by fairseq
    results.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with ThreadPoolExecutor(args.jobs) as pool:  # each cell is a fairseq subprocess; threads only wait
        futures = {pool.submit(run_cell, *key, args): key for key in todo}
        for n, future in enumerate(as_completed(futures), 1):
            key, cell = futures[future], future.result()
            done[key] = cell
            print(
                f"[{n}/{len(todo)}] {key}: {cell['status']}, valid NLL {cell['valid_nll']:.2f}, BLEU {cell['bleu']:.2f} "
                f"({cell['minutes']} min)",
                flush=True,
            )
            write_json(results, {"commands": commands, "budget": budget, "cells": list(done.values())})
    render(list(done.values()), commands, args.out, args.data)
    print(f"wrote {args.out}.md, .png, .json ({(time.time() - start) / 60:.1f} min for {len(todo)} cells)")


if __name__ == "__main__":
    main()
