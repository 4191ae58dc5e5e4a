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
another budget is refused. Each cell records its spec (fairseq options and the defaults its
architecture filled in: ``recipes.specs``); a cell whose recipe or architecture defaults have
changed since is made again. ``--jobs N`` trains N cells at once with cores / N threads each
(two single-thread cells on 2 cores take as long per cell as one two-thread cell).
"""

import argparse
import shutil
import time
from pathlib import Path

from fairseq_layernorm_plugins.experiments import experiment, render_grid
from fairseq_layernorm_plugins.experiments.curves import unigram_bits
from fairseq_layernorm_plugins.experiments.experiment import REPO
from fairseq_layernorm_plugins.recipes import specs

BUDGET = ("updates", "max_tokens", "width", "seed", "test_lines", "optimizer")  # what makes two grids' cells comparable


def cell_recipe(method, depth, lr, warmup, updates, width, max_tokens, optimizer="adam"):
    """The method's IWSLT14-mini recipe at the cell's depth, width (FFN 2 x width, 4 heads) and
    peak lr, with ``optimizer`` and inverse-sqrt warm-up over ``warmup`` updates or none (a
    constant lr)."""
    schedule = (
        {"_name": "inverse_sqrt", "warmup_updates": warmup, "warmup_init_lr": 1e-7} if warmup else {"_name": "fixed"}
    )
    return experiment.scaled_recipe(
        f"iwslt14_mini/{method}",
        depth,
        experiment.model_size(width, ffn=2 * width),
        updates=updates,
        tokens=max_tokens,
        lr=[lr],
        log_interval=10,
        generate={"beam": 1, "average_last": 1, "extra": ["--max-len-a", "1.5", "--max-len-b", "10"]},
        overrides={
            "fairseq": {
                # the same for every method (a recipe's own optimizer is replaced whole when its name differs)
                "optimizer": experiment.adam(optimizer),
                "lr_scheduler": schedule,
                "checkpoint": {"no_save": False},
            }
        },
    )


def recipe_of(cell, args):
    """The recipe of ``cell`` (method, depth, lr, warm-up) under the grid's budget ``args``."""
    method, depth, lr, warmup = cell
    return cell_recipe(method, depth, lr, warmup, args.updates, args.width, args.max_tokens, args.optimizer)


def cell_spec(cell, args, recipe=None):
    """What decides a cell's outcome beyond the grid's budget: its fairseq options and its
    architecture's defaults (``specs.recorded``); ``recipe``: the cell's, when already built."""
    return specs.recorded({"fairseq": (recipe or recipe_of(cell, args)).fairseq})


def kept_cells(records, keys, args):
    """{cell: record} of the cells of OUT.json to keep: those of ``keys`` (this command's cells)
    made as ``args`` would make them now (same options and architecture defaults; a cell recorded
    before cells recorded them is kept), and every cell this command does not make."""
    cells = {(c["method"], c["depth"], c["lr"], c["warmup"]): c for c in records}
    return {
        key: c
        for key, c in cells.items()
        if key not in keys or "spec" not in c or specs.same_run(c["spec"], cell_spec(key, args))
    }


def run_cell(cell, args):
    """Train and test one cell (method, depth, lr, warm-up) afresh; returns its record for OUT.json."""
    method, depth, lr, warmup = cell
    recipe = recipe_of(cell, args)
    run_dir = Path(args.runs) / f"{method}.{depth}.lr{lr:g}.{'warmup' if warmup else 'nowarmup'}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a cell not in OUT.json was interrupted: start it afresh
    extra = ["--no-epoch-checkpoints", "--validate-interval-updates", str(args.updates), "--no-progress-bar"]
    outcome = experiment.train_and_test(recipe, run_dir, args.data, args.seed, extra, bleu="tokenized")
    record = {"method": method, "depth": depth, "lr": lr, "warmup": warmup, "spec": cell_spec(cell, args, recipe)}
    record.update({"error": outcome.error} if outcome.error else {})
    return record | {
        "status": outcome.status(unigram_bits(args.data)),
        "valid_nll": outcome.final_nll,
        "bleu": outcome.score,
        "minutes": outcome.minutes,
        "train_loss": [] if outcome.error else [p["loss"] for p in outcome.curves["train"]],
    }


def main(argv=None):
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
    args = parser.parse_args(argv)
    if not args.methods:
        from fairseq_layernorm_plugins.methods import method_names

        args.methods = method_names("iwslt14_mini")

    from fairseq_layernorm_plugins.prepare.iwslt14_mini import prepare

    prepare(args.iwslt_dir, args.data, test_lines=args.test_lines)
    budget = experiment.budget(args, BUDGET)
    command = experiment.command_line("scripts/stability_grid.py", argv)
    # grids made before --optimizer existed: Adam
    results = experiment.Results(f"{args.out}.json", budget, command, "cells", earlier={"optimizer": "adam"})
    keys = [(m, d, lr, w) for d in args.depths for w in args.warmups for lr in args.lrs for m in args.methods]
    done = kept_cells(results.records, set(keys), args)
    todo = sorted((key for key in keys if key not in done), key=lambda key: -int(key[1].split("L")[0]))  # deepest first
    print(
        f"{len(keys) - len(todo)} of {len(keys)} cells already in {results.path}; running {len(todo)} with {args.jobs} at once",
        flush=True,
    )
    start = time.time()
    results.train(
        lambda cell: run_cell(cell, args), todo, args.jobs, done, lambda cell: cell, render_grid.grid_progress
    )
    render_grid.grid_report(list(done.values()), results.commands, args.out, unigram_bits(args.data))
    print(f"wrote {args.out}.md, .png, .json ({(time.time() - start) / 60:.1f} min for {len(todo)} cells)")


if __name__ == "__main__":
    main()
