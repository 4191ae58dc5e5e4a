"""Results tables and training-curve plots from a set of runs.

A table is one recipe directory (``iwslt14``, ``wmt14/admin``, ``wikitext103``, ...): rows are
its recipes (methods), columns its depths (a language model's: depth and subset, valid and
test; a headline table's: depth and R-1, R-2, R-L; a speech table's: depth and LibriSpeech
set); each cell is our BLEU, perplexity, ROUGE or WER (mean +- std over seeds) beside the
paper's reported number and the difference, using the metric the paper reports (``paper.compare`` in the recipe). Written as Markdown and CSV.
Plots: per run the training and validation loss (and validation BLEU, with ``--eval-bleu``)
per epoch, read from fairseq's ``--log-format json`` logs (``curves.py``).
"""

import argparse
import csv
import io
import json
import math
import statistics
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from fairseq_layernorm_plugins.atomic import atomic_path, write_text
from fairseq_layernorm_plugins.experiments.curves import first_error, read_log_curves, status
from fairseq_layernorm_plugins.experiments.figures import pyplot, save_figure
from fairseq_layernorm_plugins.recipes.config import CONFIG_DIR, list_recipes, paper_number
from fairseq_layernorm_plugins.runs.wer import SUBSETS as WER_SUBSETS


def collect(paths):
    """results.json of every run under ``paths`` (run dirs or folders of runs); a results.json
    beside its run.json names that folder as its run (a run copied or moved since it was
    evaluated is plotted from where it is now). A path that does not exist is an error."""
    results = []
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such run directory or folder of runs")
        files = [path / "results.json"] if (path / "results.json").is_file() else sorted(path.rglob("results.json"))
        for file in files:
            result = json.loads(file.read_text())
            if (file.parent / "run.json").is_file():
                result["run_dir"] = str(file.parent)
            results.append(result)
    return results


def table_names(config_dir=None):
    """The tables of ``configs/``: every folder holding a recipe (its parent in a recipe's name)."""
    return sorted({name.rsplit("/", 1)[0] for name in list_recipes(config_dir or CONFIG_DIR) if "/" in name})


def no_rows_error(results, table, paths):
    """Why ``table`` has no row in ``results`` (collected from ``paths``): nothing evaluated there,
    a table name that is neither a recipe folder nor any run's, or no run of it there."""
    where = ", ".join(map(str, paths))
    present = sorted({r["recipe"].rsplit("/", 1)[0] for r in results if "/" in r.get("recipe", "")})
    if not results:
        return f"no evaluated runs of {table} under {where} (no results.json there: fairseq-ln-evaluate RUN first)"
    if table not in table_names() and table not in present:
        return f"--table {table}: no such table (recipe folder) in configs/ nor among the runs under {where} (they have: {', '.join(present)})"
    return f"no evaluated runs of {table} under {where} (evaluated there: {', '.join(present)})"


class Row(NamedTuple):
    """One cell of a table: a method at a depth (and, for a language model, a subset), over its seeds."""

    method: str
    depth: str  # "6L-6L"; a language model's column also names its subset: "16L valid"
    mean: float
    std: float | None
    seeds: int
    paper_value: object  # the paper's number: a number, "failed", or None
    label: str  # what our number is (the metric's label)
    paper: dict  # the recipe's paper section


ROUGE_COLUMNS = {"R-1": "rouge1", "R-2": "rouge2", "R-L": "rougeL"}
SUBSET_ORDER = {name: i for i, name in enumerate(("valid", "test", *ROUGE_COLUMNS, *WER_SUBSETS))}


def result_scores(result):
    """{column suffix: (our score, its label, the paper's number)} of one results.json: a
    translation run's BLEU in the paper's ``compare`` metric (suffix ""), a language model's
    perplexity on each of valid and test (suffixes " valid", " test"), a speech model's WER on
    each LibriSpeech set (" dev-clean", ...), a headline run's rouge-score F1 ROUGE-1, -2 and -L
    (" R-1", " R-2", " R-L")."""
    paper = result.get("paper") or {}
    for metric in ("perplexity", "wer"):  # runs/perplexity.py, runs/wer.py: one score per subset
        if metric in result:
            reported = (paper.get(metric) or {}).get(result["depth"])
            return {
                f" {subset}": (
                    value["score"],
                    value["label"],
                    reported.get(subset) if isinstance(reported, dict) else reported,
                )
                for subset, value in result[metric].items()
            }
    if "rouge" in result:  # a headline run: and R-L beside the paper's triple
        value = result["rouge"]["rouge"]
        reported = (paper.get("rouge") or {}).get(result["depth"])
        return {
            f" {column}": (value[metric], value["label"], reported[i] if isinstance(reported, list) else reported)
            for i, (column, metric) in enumerate(ROUGE_COLUMNS.items())
        }
    metric = paper.get("compare") or result["headline"]
    bleu = result["bleu"][metric]
    return {"": (bleu["score"], bleu["label"], paper.get("bleu", {}).get(result["depth"]))}


def table_rows(results, table):
    """A Row per (method, depth) of the recipes in ``table`` (per subset for a language model),
    our metric the paper's ``compare``."""
    cells = defaultdict(list)
    meta = {}
    for r in results:
        recipe = r["recipe"]
        if recipe.rsplit("/", 1)[0] != table:
            continue
        for suffix, (score, label, reported) in result_scores(r).items():
            column = f"{r['depth']}{suffix}"
            cells[recipe, column].append(score)
            meta[recipe, column] = (reported, label, r.get("paper") or {})
    rows = []
    for (recipe, column), scores in sorted(cells.items(), key=lambda kv: (kv[0][0], _depth_key(kv[0][1]))):
        reported, label, paper = meta[recipe, column]
        std = statistics.stdev(scores) if len(scores) > 1 else None
        rows.append(
            Row(recipe.rsplit("/", 1)[1], column, statistics.mean(scores), std, len(scores), reported, label, paper)
        )
    return rows


def _depth_key(column):
    """Sort key of a column: its depth's layer counts, then its subset (valid before test) or
    ROUGE column (R-1, R-2, R-L)."""
    depth, _, subset = (column or "0L-0L").partition(" ")
    try:
        layers = tuple(int(n) for n in depth.replace("L", "").split("-"))
    except ValueError:
        layers = (0, 0)
    return layers, SUBSET_ORDER.get(subset, len(SUBSET_ORDER))


def render(rows, table):
    """(markdown, csv) of the table: rows methods, per depth ours / paper / difference."""
    depths = sorted({r.depth for r in rows}, key=_depth_key)
    methods = list(dict.fromkeys(r.method for r in rows))
    by = {(r.method, r.depth): r for r in rows}
    papers = [r.paper for r in rows if r.paper]
    header = ["method"] + [f"{d} {col}" for d in depths for col in ("ours", "paper", "diff")]
    lines = [f"### {table}", ""]
    if papers:
        approx = " (approximate, read off a plot)" if any(p.get("approximate") for p in papers) else ""
        sources = "; ".join(dict.fromkeys(p.get("source", "") for p in papers))
        lines += [f"paper: {sources}; {papers[0].get('metric', '')}{approx}", ""]
    lines += [
        f"ours: {rows[0].label}; mean +- std over seeds (n)",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["method", "depth", "ours_mean", "ours_std", "seeds", "paper", "diff"])
    for method in methods:
        cells = [method]
        for depth in depths:
            row = by.get((method, depth))
            if row is None:
                cells += ["", "", ""]
                continue
            paper = row.paper_value
            diff = row.mean - paper if isinstance(paper, (int, float)) else None
            cells += [
                f"{row.mean:.2f}" + (f" +- {row.std:.2f}" if row.std is not None else "") + f" ({row.seeds})",
                paper_number(paper),
                f"{diff:+.2f}" if diff is not None else "",
            ]
            writer.writerow(
                [
                    method,
                    depth,
                    f"{row.mean:.2f}",
                    "" if row.std is None else f"{row.std:.2f}",
                    row.seeds,
                    paper_number(paper),
                    "" if diff is None else f"{diff:+.2f}",
                ]
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n", out.getvalue()


def baseline_rows(run_dirs, baseline="postln"):
    """Per run: method, headline BLEU (label, signature), updates, training minutes and final
    validation loss, with the differences to the ``baseline`` method's run (None without one)."""
    rows = []
    for run_dir in map(Path, run_dirs):
        result = json.loads((run_dir / "results.json").read_text())
        curves = read_log_curves(run_dir / "train.log")
        bleu = result["bleu"][result["headline"]]
        rows.append(
            {
                "method": result["recipe"].rsplit("/", 1)[-1],
                "bleu": bleu["score"],
                "label": bleu["label"],
                "signature": bleu.get("signature"),
                "sentences": result["sentences"],
                "updates": curves["end"]["update"],
                "minutes": curves["end"]["wall"] / 60,
                "valid_loss": curves["valid"][-1]["loss"] if curves["valid"] else None,
            }
        )
    base = next((r for r in rows if r["method"] == baseline), None)
    for row in rows:
        for key in ("bleu", "updates", "minutes"):
            row[f"{key}_diff"] = None if base is None else row[key] - base[key]
    return rows


def baseline_report(run_dirs, out, title, baseline="postln", notes=(), depth=None):
    """Write OUT.md, OUT.csv (each method beside the ``baseline`` run of the same job: BLEU,
    updates, training time, final validation loss; ``notes`` listed below the table) and
    OUT.png (loss curves); ``depth`` (:class:`DepthColumn`) adds its table below (and in
    OUT-depth.csv) and its validation curves as a panel of the plot. Returns the Markdown."""
    rows = baseline_rows(run_dirs, baseline)
    signatures = sorted({r["signature"] for r in rows if r["signature"]})
    header = [
        "method",
        "BLEU",
        f"vs {baseline}",
        "updates",
        f"vs {baseline}",
        "training min",
        f"vs {baseline}",
        "final valid loss",
    ]
    lines = [
        f"### {title}",
        "",
        f"BLEU: {rows[0]['label']} on {rows[0]['sentences']} test sentences"
        + (f" [{', '.join(signatures)}]" if signatures else "")
        + "; one seed.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    table = [
        ["method", "bleu", "bleu_diff", "updates", "updates_diff", "minutes", "minutes_diff", "valid_loss", "signature"]
    ]
    for r in rows:
        diffs = [
            ("" if r[f"{k}_diff"] is None else fmt.format(round(r[f"{k}_diff"], digits) + 0))
            for k, fmt, digits in (("bleu", "{:+.2f}", 2), ("updates", "{:+d}", 0), ("minutes", "{:+.1f}", 1))
        ]  # + 0: no "-0.0"
        valid = "" if r["valid_loss"] is None else f"{r['valid_loss']:.3f}"
        lines.append(
            f"| {r['method']} | {r['bleu']:.2f} | {diffs[0]} | {r['updates']} | {diffs[1]} | {r['minutes']:.1f} | {diffs[2]} | {valid} |"
        )
        table.append(
            [r["method"], f"{r['bleu']:.2f}", diffs[0], r["updates"], diffs[1], f"{r['minutes']:.2f}", diffs[2], valid]
            + [r["signature"] or ""]
        )
    lines += [""] + [f"- {note}" for note in notes] if notes else []
    if depth is not None:
        depth_lines, depth_table = depth_section(depth)
        lines += [""] + depth_lines
        write_csv(f"{out}-depth.csv", depth_table)
    markdown = "\n".join(lines) + "\n"
    plot_curves(run_dirs, f"{out}.png", title=title, depth=depth)
    write_csv(f"{out}.csv", table)
    write_text(f"{out}.md", markdown)
    return markdown


def write_csv(path, rows):
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        csv.writer(f).writerows(rows)


class DepthColumn(NamedTuple):
    """Runs of every method at one depth where Post-LN fails (the main job's depth column),
    judged by their final validation NLL against ``unigram`` (:func:`curves.status`)."""

    run_dirs: list
    unigram: float  # bits per token: the unigram entropy of the training targets
    setting: str  # what the runs are, for the table's title


def depth_rows(depth):
    """Per run of ``depth`` (:class:`DepthColumn`): method, depth, status, final validation NLL
    (bits per token; NaN when fairseq stopped on a NaN/inf loss), how far it is below the
    unigram entropy, updates and training minutes."""
    rows = []
    for run_dir in map(Path, depth.run_dirs):
        run = json.loads((run_dir / "run.json").read_text())
        curves = read_log_curves(run_dir / "train.log")
        stopped = first_error(run_dir / "train.log")
        nll = curves["valid"][-1]["nll_loss"] if curves["valid"] and stopped is None else math.nan
        rows.append(
            {
                "method": run["recipe"].rsplit("/", 1)[-1],
                "depth": run.get("depth"),
                "status": status(nll, depth.unigram),
                "valid_nll": nll,
                "below_unigram": depth.unigram - nll,
                "updates": curves["end"]["update"],
                "minutes": curves["end"]["wall"] / 60,
            }
        )
    return rows


def depth_section(depth):
    """(Markdown lines, CSV rows) of the depth column's table."""
    rows = depth_rows(depth)
    lines = [
        f"### {depth.setting}",
        "",
        f"Status from the final validation NLL against the unigram entropy of the training targets "
        f"({depth.unigram:.2f} bits per token): stalled = not below it, diverged = NaN/inf.",
        "",
        "| method | depth | status | final valid NLL (bits) | below unigram | updates | training min |",
        "|---|---|---|---|---|---|---|",
    ]
    table = [["method", "depth", "status", "valid_nll", "below_unigram", "updates", "minutes"]]
    for r in rows:
        nll, below = (f"{r[k]:.2f}" if math.isfinite(r[k]) else "" for k in ("valid_nll", "below_unigram"))
        status_cell = r["status"] if r["status"] == "trained" else f"**{r['status']}**"
        lines.append(
            f"| {r['method']} | {r['depth']} | {status_cell} | {nll} | {below} | {r['updates']} | {r['minutes']:.1f} |"
        )
        table.append([r["method"], r["depth"], r["status"], nll, below, r["updates"], f"{r['minutes']:.2f}"])
    return lines, table


def run_style(run_dir, seen):
    """(label, colour, line style) of a run's curves: its registered method's label and colour, its
    runs at other depths or seeds (counted in ``seen``) in other line styles."""
    from fairseq_layernorm_plugins.methods import METHODS, method_names

    method_names()  # registers every method
    run = json.loads((Path(run_dir) / "run.json").read_text())
    name = run["recipe"].rsplit("/", 1)[-1]
    method = METHODS.get(name)
    style = {
        "label": f"{method.label if method else name} {run.get('depth') or ''}".strip(),
        "color": method.colour if method else None,
        "linestyle": ("-", "--", ":", "-.")[seen.get(name, 0) % 4],
    }
    seen[name] = seen.get(name, 0) + 1
    return style


def plot_curves(run_dirs, output, title="", depth=None):
    """One PNG: training loss, validation loss, and validation BLEU when the logs have it,
    per (fractional) epoch; one line per run, a registered method's label and colour (its
    runs at other depths or seeds in other line styles). ``depth`` (:class:`DepthColumn`): a
    last panel with its runs' validation NLL per update and the unigram entropy."""
    plt = pyplot()
    seen = {}
    runs = [(run_style(run_dir, seen), read_log_curves(Path(run_dir) / "train.log")) for run_dir in run_dirs]
    has_bleu = any(v["bleu"] is not None for _, c in runs for v in c["valid"])
    panels = 2 + has_bleu + (depth is not None)
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4))
    for style, curves in runs:
        for ax, key, points in (
            (axes[0], "loss", curves["train"]),
            (axes[1], "loss", curves["valid"]),
            (axes[2] if has_bleu else None, "bleu", curves["valid"]),
        ):
            if ax is not None and points:
                ax.plot(
                    [p["epoch"] for p in points],
                    [float("nan") if p[key] is None else p[key] for p in points],
                    marker="o" if points is curves["valid"] else None,
                    **style,
                )
    labels = [("epoch", "training loss"), ("epoch", "validation loss"), ("epoch", "validation BLEU")][: 2 + has_bleu]
    if depth is not None:
        ax, seen = axes[-1], {}
        for run_dir in depth.run_dirs:
            valid = read_log_curves(Path(run_dir) / "train.log")["valid"]
            ax.plot(
                [v["update"] for v in valid], [v["nll_loss"] for v in valid], marker="o", **run_style(run_dir, seen)
            )
        ax.axhline(depth.unigram, color="grey", linestyle="--", label="unigram entropy")
        ax.set_title(textwrap.fill(depth.setting, 60), fontsize=8)
        ax.legend(fontsize=7)
        labels.append(("update", "validation NLL (bits), deep models"))
    for ax, (x, y) in zip(axes, labels):
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
    if axes[0].get_legend_handles_labels()[0]:  # no run has logged a training loss yet: no legend
        axes[0].legend()
    fig.suptitle(title)
    return save_figure(fig, output, dpi=120)


MAIN_DOC = """Collect evaluated runs into a paper's table (Markdown + CSV, ours beside the
paper's number) and plot their training curves (PNG):

    fairseq-ln-table runs/ --table wmt14/admin --out results/wmt14_admin
    -> results/wmt14_admin.md, .csv, .png

A table is a recipe directory under configs/ (iwslt14, iwslt14_mini, wmt14/admin,
wmt14/b2t, wikitext103); every run under the given paths whose recipe is in it is included.
"""


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=MAIN_DOC.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("paths", nargs="+", help="run directories or folders holding runs (with results.json)")
    parser.add_argument("--table", required=True, help="recipe directory, e.g. wmt14/admin")
    parser.add_argument("--out", required=True, help="output prefix: writes OUT.md, OUT.csv, OUT.png")
    args = parser.parse_args(argv)
    try:
        results = collect(args.paths)
    except FileNotFoundError as err:
        parser.exit(2, f"error: {err}\n")
    rows = table_rows(results, args.table)
    if not rows:
        parser.exit(2, f"error: {no_rows_error(results, args.table, args.paths)}\n")
    markdown, table_csv = render(rows, args.table)
    paths = {ext: Path(f"{args.out}.{ext}") for ext in ("md", "csv", "png")}
    run_dirs = [r["run_dir"] for r in results if r["recipe"].rsplit("/", 1)[0] == args.table]
    plot_curves(run_dirs, paths["png"], title=args.table)
    write_text(paths["md"], markdown)
    write_text(paths["csv"], table_csv)
    print(markdown)
    print("wrote " + ", ".join(map(str, paths.values())))
    return rows
