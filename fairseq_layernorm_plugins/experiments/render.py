"""Markdown tables and matplotlib plots of a claim's results (``scripts/claims.py``; the
records its OUT.json holds, ``experiment.py``): per run its status, final validation NLL and
BLEU, the updates it took to the baseline's final validation BLEU and its test BLEU, with the
validation curves; over seeds, mean and spread with differences paired by seed; a claim in
another precision beside fp32. The stability grid's report is ``render_grid.py``, the GPU
check's ``render_check.py``; both use :func:`number`.
"""

import math
from pathlib import Path

from fairseq_layernorm_plugins.atomic import write_text
from fairseq_layernorm_plugins.experiments.claim import UPDATES
from fairseq_layernorm_plugins.experiments.experiment import seed_results
from fairseq_layernorm_plugins.experiments.figures import pyplot, save_figure
from fairseq_layernorm_plugins.recipes.specs import without_defaults


def save_report(fig, out, lines):
    """OUT.png from ``fig`` and OUT.md from ``lines``; returns the markdown."""
    save_figure(fig, f"{out}.png")
    markdown = "\n".join(lines)
    write_text(f"{out}.md", markdown + "\n")
    return markdown


def number(value, digits=2):
    """``value`` with ``digits`` decimals if a float, as it is otherwise, "" for None."""
    return "" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def loss_scale(record):
    """A claim table's cell: an fp16 run's smallest and last loss scale (and its skipped
    updates, where the record counts them)."""
    if "loss_scale_min" not in record:
        return " n/a |"
    count = record.get("overflows")
    skipped = "" if count is None else f", {count} overflow{'' if count == 1 else 's'}"
    return f" {record['loss_scale_min']:g} / {record['loss_scale_last']:g}{skipped} |"


def first_update_reaching(record, bleu):
    """The first validated update whose BLEU is at least ``bleu`` (None if none, or if ``bleu`` is None)."""
    if bleu is None:
        return None
    return next((v["update"] for v in record["valid"] if v["bleu"] is not None and v["bleu"] >= bleu), None)


def claim_progress(run, record):
    """The line printed when a claim's run ends."""
    last = scored_validation(record)
    scores = (
        f"valid perplexity {number(last.get('ppl'))}, test perplexity {record['test_ppl']:.2f}"
        if "test_ppl" in record
        else f"valid BLEU {number(last.get('bleu'))}, test BLEU {record['test_bleu']:.2f}"
    )
    return (
        f"{record['label']}: {record['status']}, valid NLL {last.get('nll', float('nan')):.3f}, {scores} "
        f"({record['minutes']} min)"
    )


def device_note(records, prefix=None):
    """The sentence naming the runs of ``records`` trained on a GPU (their record's "device",
    "cpu" when absent; "cpu+cuda": resumed on the other), each as ``prefix(record) + label``."""
    elsewhere = [r for r in records if r.get("device", "cpu") != "cpu"]
    if not elsewhere:
        return "Trained on a CPU."
    named = [
        f"{prefix(r) if prefix else ''}{r['label']}" + (f" ({r['device']})" if r["device"] != "cuda" else "")
        for r in elsewhere
    ]
    return f"Trained on a GPU: {', '.join(named)}; the others on a CPU."


def claim_header(claim_name, claim, commands):
    """The lines every claim report starts with: the claim, the paper, the commands (none before
    a run finishes: ``--report-only`` then shows runs still training)."""
    made = ["Made by:", ""] + [f"    {c}" for c in commands] if commands else ["Made by: no run has finished yet."]
    return [f"### {claim_name}: {claim.paper}", "", f"Claim: {claim.statement}", "", *made]


def lm_claim_report(claim_name, claim, records, commands, out, unigram):
    """OUT.md (per run: depth, status, final and best validation perplexity, test perplexity)
    and OUT.png (validation perplexity against updates, one panel per depth) of a language-
    model claim's runs; returns the markdown. ``unigram``: the stall threshold in bits."""
    from fairseq_layernorm_plugins import models  # noqa: F401  (registers every method)
    from fairseq_layernorm_plugins.methods import METHODS

    order = [r.label for r in claim.runs]
    records = sorted(records, key=lambda r: order.index(r["label"]))
    depths = list(dict.fromkeys(r.get("depth") or claim.depth for r in records))
    spec = records[0]["spec"] if records else {"budget": {}, "fairseq": {"lr_scheduler": {}}}
    lines = claim_header(claim_name, claim, commands) + [
        "",
        f"WikiText-2 (2.1M training tokens, 33,278 words), decoder-only, d={claim.width} (FFN {4 * claim.width}, 4 "
        f"heads), adaptive input and softmax, blocks of 256 tokens, {spec['budget'].get('max_tokens')} tokens per "
        f"update, peak lr {claim.lr:g} after {spec['fairseq']['lr_scheduler'].get('warmup_updates')} warm-up "
        f"updates, {spec['budget'].get('updates')} updates; validation loss on the whole validation set every "
        f"{spec['budget'].get('validate_every')} updates; test: fairseq-eval-lm of checkpoint_best.pt (blocks of "
        f"256, 128 tokens of context). Stalled = final validation NLL not below the unigram entropy of the "
        f"training text ({unigram:.2f} bits, perplexity {2**unigram:.0f}). {device_note(records)}",
        "",
        "| run | depth | status | final valid NLL (bits) | final valid perplexity | best valid perplexity | "
        "test perplexity | minutes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        last = r["valid"][-1] if r["valid"] else {"nll": float("nan"), "ppl": None}
        best = min((v["ppl"] for v in r["valid"]), default=None)
        lines.append(
            f"| {r['label']} | {r.get('depth') or claim.depth} | {r['status']} | {last['nll']:.3f} | "
            f"{number(last['ppl'])} | {number(best)} | {number(r['test_ppl'])} | {r.get('minutes', '')} |"
        )
    plt = pyplot()
    fig, axes = plt.subplots(1, len(depths), figsize=(5.5 * len(depths), 4), squeeze=False)
    for ax, depth in zip(axes[0], depths):
        for r in records:
            if (r.get("depth") or claim.depth) == depth:
                updates = [v["update"] for v in r["valid"]]
                ax.plot(updates, [v["ppl"] for v in r["valid"]], color=METHODS[r["method"]].colour, label=legend(r))
        ax.axhline(2**unigram, color="grey", lw=0.6, ls=":", label="unigram")
        ax.set(xlabel="updates", ylabel="validation perplexity", yscale="log", title=f"{claim_name}: {depth}")
        ax.legend(fontsize=7)
    return save_report(fig, out, lines)


def claim_report(claim_name, claim, records, commands, out, unigram):
    """OUT.md (table: status, the validation NLL and BLEU of the checkpoint scored (the last, or
    a converged run's best), the best validation BLEU, updates to the baseline's scored validation
    BLEU, test BLEU, the averaged checkpoints' test BLEU where measured) and OUT.png (validation
    BLEU and NLL against updates; converged runs: also the NLL from update UPDATES on; runs with
    model options of their own drawn with crosses) of the runs of ``claim`` (``claim.Claim``);
    returns the markdown. ``unigram``: the stall threshold in bits."""
    if claim.language_model:
        return lm_claim_report(claim_name, claim, records, commands, out, unigram)
    from fairseq_layernorm_plugins import models  # noqa: F401  (registers every method)
    from fairseq_layernorm_plugins.methods import METHODS

    order = [r.label for r in claim.runs]
    records = sorted(records, key=lambda r: order.index(r["label"]))
    base = next((r for r in records if r["label"] == claim.baseline and r["valid"]), None)
    target = scored_validation(base)["bleu"] if base else None
    inits = sorted({r["spec"]["fairseq"]["model"].get("init_style", "(arch default)") for r in records})
    precisions = sorted({r["spec"].get("precision", "fp32") for r in records})
    fp16 = any("loss_scale_min" in r for r in records)
    averaged = any("test_bleu_averaged" in r for r in records)
    lines = [
        *claim_header(claim_name, claim, commands),
        "",
        f"Multi30k De-En, {claim.depth}, d={claim.width} (FFN {4 * claim.width}, 4 heads), peak lr {claim.lr:g}, "
        f"no-warm-up runs decay after update {claim.decay_after}; validation: greedy SacreBLEU on 1,014 sentences; "
        f"test: beam 5, SacreBLEU on test_2016_flickr. Stalled = final validation NLL not below the unigram "
        f"entropy of the training targets ({unigram:.2f} bits). Initialisation (`--init-style`): {', '.join(inits)}. "
        f"Precision: {', '.join(precisions)}. {device_note(records)}",
        "",
        *(converged_note(records) if converged(records) else []),
        *extended_note(records),
        f"| run | optimizer | warm-up | status | {scored_name(records)} valid NLL | {scored_name(records)} valid BLEU | "
        "best valid BLEU | "
        + (
            f"updates to {target:.1f} valid BLEU ({claim.baseline})"
            if base
            else f"updates to {claim.baseline}'s valid BLEU"
        )
        + " | test BLEU |"
        + (" test BLEU, checkpoints averaged |" if averaged else "")
        + (" loss scale min / last |" if fp16 else ""),
        "|---|---|---|---|---|---|---|---|---|" + ("---|" if averaged else "") + ("---|" if fp16 else ""),
    ]
    for r in records:
        last = scored_validation(r)
        best = max((v["bleu"] for v in r["valid"] if v["bleu"] is not None), default=None)
        reach = "n/a (not run)" if not base else first_update_reaching(r, target) or "not reached"
        lines.append(
            f"| {r['label']} | {r['optimizer']} | {r['warmup'] or 'none'} | {status_of(r)} | {last['nll']:.3f} | "
            f"{number(last['bleu'])} | {number(best)} | {reach} | "
            f"{number(r['test_bleu'])} |"
            + (f" {number(r.get('test_bleu_averaged'))} |" if averaged else "")
            + (loss_scale(r) if fp16 else "")
        )

    plt = pyplot()
    # converged runs part by hundredths of a bit: a third panel, the validation NLL after the fixed budget
    late = converged(records) and any(r["updates"] > UPDATES for r in records)
    fig, axes = plt.subplots(1, 3 if late else 2, figsize=(16 if late else 11, 4))
    ax_bleu, ax_nll = axes[:2]
    styles = ("-", "--", ":", "-.")
    for r in records:
        colour = METHODS[r["method"]].colour
        style = styles[
            (0 if r["optimizer"] == "adam" else 1)
            + (2 if r["label"].endswith("no warm-up") or "w/o" in r["label"] else 0)
        ]
        marker = "x" if r["spec"].get("run", {}).get("model") else "."  # a run with model options of its own
        updates = [v["update"] for v in r["valid"]]
        ax_bleu.plot(
            updates, [v["bleu"] or 0.0 for v in r["valid"]], style, color=colour, label=legend(r), marker=marker
        )
        for ax in axes[1:]:
            ax.plot(updates, [v["nll"] for v in r["valid"]], style, color=colour, label=legend(r), marker=marker)
            if r.get("best_update") is not None and r["valid"]:  # converged: the checkpoint scored
                best = scored_validation(r)
                ax.plot(best["update"], best["nll"], "*", color=colour, markersize=11, markeredgecolor="black")
    if late:
        after = [  # a stalled or diverged run's NLL would undo the zoom
            v["nll"]
            for r in records
            if health(r) not in ("stalled", "diverged")
            for v in r["valid"]
            if v["update"] >= UPDATES and math.isfinite(v["nll"])
        ]
        axes[2].set(
            xlabel="updates",
            ylabel="validation NLL (bits/token)",
            title=f"from update {UPDATES} on",
            xlim=(UPDATES, max(r["updates"] for r in records) * 1.02),
            **({"ylim": (min(after) - 0.02, max(after) + 0.02)} if after else {}),
        )
    if target is not None:
        ax_bleu.axhline(target, color="grey", lw=0.6)
    ax_nll.axhline(unigram, color="grey", lw=0.6, ls=":", label="unigram entropy")
    ax_bleu.set(xlabel="updates", ylabel="validation BLEU (greedy)", title=f"{claim_name}: {claim.depth}")
    ax_nll.set(
        xlabel="updates",
        ylabel="validation NLL (bits/token)",
        title="validation NLL" + (" (*: best checkpoint)" if converged(records) else ""),
    )
    ax_nll.legend(fontsize=7)
    return save_report(fig, out, lines)


def claim_seeds_report(claim_name, claim, first):
    """FIRST-seeds.md and .png, once runs of the claim are made under more than one seed (FIRST is
    seed 1's OUT): per run, its test BLEU per seed, mean and sample standard deviation of test BLEU
    and of the scored checkpoint's validation NLL and BLEU, and its test BLEU and validation NLL
    minus the baseline's, paired by seed (same seed: same data order); the same for the averaged
    checkpoints' test BLEU where every run has one, each the mean of as many checkpoints.
    Returns the markdown, or None with fewer than two seeds."""
    from fairseq_layernorm_plugins.methods import METHODS

    by_seed = {seed: {r["label"]: r for r in res["runs"]} for seed, res in sorted(seed_results(first).items())}
    if len(by_seed) < 2:
        return None
    table = {
        run.label: {seed: runs[run.label] for seed, runs in by_seed.items() if run.label in runs} for run in claim.runs
    }
    table = {label: seeds for label, seeds in table.items() if len(seeds) > 1}
    base = table.get(claim.baseline, {})
    scored = scored_name([r for seeds in table.values() for r in seeds.values()])
    # averaged scores are paired where every run has one, each the mean of as many checkpoints
    every = [r for seeds in table.values() for r in seeds.values()]
    averaged = all("test_bleu_averaged" in r for r in every) and len({len(r["averaged"]) for r in every}) == 1
    lines = [
        f"### {claim_name} over seeds: {claim.paper}",
        "",
        f"Each run as in {Path(first).name}.md, trained again with other `--seed`s (initialisation, dropout and "
        f"data order). Mean ± sample standard deviation over seeds; the differences from {claim.baseline} are "
        "paired by seed. "
        + device_note(
            [{**r, "seed": seed} for seed, runs in by_seed.items() for r in runs.values()],
            prefix=lambda r: f"seed {r['seed']} ",
        ),
        "",
        f"| run | seeds | test BLEU per seed | test BLEU | {scored} valid NLL | {scored} valid BLEU | "
        f"test BLEU − {claim.baseline}, per seed | mean difference | valid NLL − {claim.baseline} |"
        + (f" averaged test BLEU | averaged − {claim.baseline} |" if averaged else ""),
        "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if averaged else ""),
    ]
    for label, seeds in table.items():
        final = {seed: scored_validation(r) for seed, r in seeds.items()}
        _, diffs, nll_diffs = paired_differences(seeds, base)
        paired = label != claim.baseline and len(diffs) > 1
        per_seed = ", ".join(f"{r['test_bleu']:.2f}" for r in seeds.values())
        lines.append(
            f"| {label} | {', '.join(map(str, seeds))} | {per_seed} | "
            f"{_spread([r['test_bleu'] for r in seeds.values()])} | {_spread([f['nll'] for f in final.values()], 3)} | "
            f"{_spread([f['bleu'] or 0.0 for f in final.values()])} | "
            f"{', '.join(f'{d:+.2f}' for d in diffs) if paired else ''} | {_spread(diffs, sign=True) if paired else ''} | "
            f"{_spread(nll_diffs, 3, sign=True) if paired else ''} |"
            + (averaged_columns(seeds, base, paired) if averaged else "")
        )
    for against in claim.also_against:
        rows = paired_rows(table, against)
        if rows:
            lines += [
                "",
                f"Against {against}, paired by seed (the seeds both runs have):",
                "",
                f"| run | seeds | test BLEU − {against}, per seed | mean difference | {scored} valid NLL − {against} |",
                "|---|---|---|---|---|",
                *rows,
            ]
    if converged(every):
        lines += ["", *converged_runs_by_seed(claim, by_seed)]

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, value, name in zip(
        axes,
        (lambda r: r["test_bleu"], lambda r: scored_validation(r)["nll"]),
        ("test BLEU", f"{scored} validation NLL (bits)"),
    ):
        for x, seeds in enumerate(table.values()):
            values = [value(r) for r in seeds.values() if r["valid"]]
            colour = METHODS[next(iter(seeds.values()))["method"]].colour
            ax.scatter([x] * len(values), values, color=colour, s=18)
            ax.hlines(sum(values) / len(values), x - 0.25, x + 0.25, color=colour)
        ax.set_xticks(range(len(table)), list(table), rotation=20, fontsize=8)
        ax.set(ylabel=name, title=f"{claim_name}: {claim.depth}, {len(by_seed)} seeds")
    return save_report(fig, f"{first}-seeds", lines)


def spec_differences(a, b, ignore=("precision",)):
    """The entries of two run specs (nested dicts) that differ, as "path: a vs b" strings, keys
    named in ``ignore`` left out wherever they stand ("unset" for an entry one spec lacks)."""

    def flat(spec, prefix=""):
        items = {}
        for key, value in spec.items():
            if key not in ignore:
                items |= flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value}
        return items

    fa, fb = flat(a), flat(b)
    return [
        f"{key}: {fa.get(key, 'unset')} vs {fb.get(key, 'unset')}"
        for key in sorted(fa.keys() | fb.keys())
        if fa.get(key, "unset") != fb.get(key, "unset")
    ]


def precision_report(claim_name, claim, records, other, out):
    """OUT.md and .png: each run of a claim trained in one precision (``records``) beside the same
    run in another (``other``: the records of that precision's OUT.json, same seed and budget):
    status, final validation NLL, test score (BLEU; a language model's perplexity) and their
    difference, and the fp16 run's loss scale and skipped updates; the plot: both validation NLL
    curves and the fp16 loss scale history. Any other setting in which a pair's specs differ is
    listed under the table."""
    from fairseq_layernorm_plugins.methods import METHODS

    precision = lambda rs: rs[0]["spec"].get("precision", "fp32")
    mine, theirs = precision(records), precision(other)
    score, score_name = ("test_ppl", "test ppl") if claim.language_model else ("test_bleu", "test BLEU")
    by_label = {r["label"]: r for r in other}
    order = [run.label for run in claim.runs]
    ours = sorted((r for r in records if r["label"] in by_label), key=lambda r: order.index(r["label"]))
    pairs = [(r, by_label[r["label"]]) for r in ours]
    half = lambda a, b: a if "loss_scale_min" in a else b  # the fp16 run of a pair, if either is
    final = lambda r: scored_validation(r)["nll"]
    lines = [
        f"### {claim_name} in {mine} beside {theirs}: {claim.paper}",
        "",
        f"Each run of the claim ({claim.depth}, d={claim.width}) trained in {theirs} and in {mine}, with the same "
        "seed and budget. Overflows: updates skipped for inf/NaN gradients (each halves the loss scale).",
        "",
        f"| run | status {theirs} | status {mine} | final valid NLL {theirs} | final valid NLL {mine} | "
        f"{score_name} {theirs} | {score_name} {mine} | {mine} − {theirs} | fp16 loss scale min / last |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for a, b in pairs:
        lines.append(
            f"| {a['label']} | {b['status']} | {a['status']} | {final(b):.3f} | {final(a):.3f} | {b[score]:.2f} | "
            f"{a[score]:.2f} | {a[score] - b[score]:+.2f} |" + loss_scale(half(a, b))
        )
    missing = [r["label"] for r in records if r["label"] not in by_label]
    lines += ["", f"Not in the {theirs} results: {', '.join(missing)}."] if missing else []
    differing = [(a["label"], spec_differences(*map(without_defaults, (a["spec"], b["spec"])))) for a, b in pairs]
    if any(diffs for _, diffs in differing):
        lines += ["", f"Settings that differ besides the precision ({mine} vs {theirs}):", ""]
        lines += [f"- {label}: {'; '.join(diffs)}" for label, diffs in differing if diffs]

    plt = pyplot()
    fig, (ax_nll, ax_scale) = plt.subplots(1, 2, figsize=(11, 4))
    for a, b in pairs:
        colour = METHODS[a["method"]].colour
        for r, style, name in ((b, "-", theirs), (a, "--", mine)):
            updates, nll = [v["update"] for v in r["valid"]], [v["nll"] for v in r["valid"]]
            ax_nll.plot(updates, nll, style, color=colour, marker=".", label=f"{r['label']} {name}")
        if half(a, b).get("loss_scales"):
            ax_scale.step(*zip(*half(a, b)["loss_scales"]), where="post", color=colour, label=a["label"])
    ax_nll.set(xlabel="updates", ylabel="validation NLL (bits/token)", title=f"{claim_name}: {theirs} (—), {mine} (--)")
    ax_nll.legend(fontsize=7)
    ax_scale.set(xlabel="updates", ylabel="loss scale", yscale="log", title="fp16 loss scale (logged updates)")
    if ax_scale.has_data():
        ax_scale.legend(fontsize=7)
    return save_report(fig, out, lines)


def paired_differences(seeds, base):
    """(the seeds both have, one run's test BLEU and scored validation NLL minus the run ``base``'s
    for each of them); ``seeds``, ``base``: seed -> record."""
    common = [seed for seed in seeds if seed in base]
    return (
        common,
        [seeds[seed]["test_bleu"] - base[seed]["test_bleu"] for seed in common],
        [scored_validation(seeds[seed])["nll"] - scored_validation(base[seed])["nll"] for seed in common],
    )


def paired_rows(table, against):
    """Seeds-report rows of each run's test BLEU and scored validation NLL minus those of the run
    ``against``, paired by seed, for the runs with at least two seeds in common with it."""
    base, rows = table.get(against, {}), []
    for label, seeds in table.items():
        common, diffs, nll = paired_differences(seeds, base)
        if label == against or len(common) < 2:
            continue
        rows.append(
            f"| {label} | {', '.join(map(str, common))} | {', '.join(f'{d:+.2f}' for d in diffs)} | "
            f"{_spread(diffs, sign=True)} | {_spread(nll, 3, sign=True)} |"
        )
    return rows


def averaged_columns(seeds, base, paired):
    """A seeds row's averaged-checkpoints columns: its test BLEU and, ``paired``, its difference
    from the baseline's, paired by seed (mean ± sd)."""
    values = [r["test_bleu_averaged"] for r in seeds.values()]
    diffs = [r["test_bleu_averaged"] - base[seed]["test_bleu_averaged"] for seed, r in seeds.items() if seed in base]
    return f" {_spread(values)} | {_spread(diffs, sign=True) if paired else ''} |"


def converged(records):
    """Whether the runs were trained to convergence (``--patience``)."""
    return any("stopped_early" in r for r in records)


def scored_name(records):
    """What the validation of the scored checkpoint is called: "best-checkpoint" (converged
    runs) or "final"."""
    return "best-checkpoint" if converged(records) else "final"


def scored_validation(record):
    """The validation ({"update", "nll", "bleu"}) of the checkpoint that translated the test
    set: checkpoint_best.pt's (a run with ``--patience``: its ``best_update``), else the last."""
    if not record["valid"]:
        return {"update": None, "nll": float("nan"), "bleu": None}
    best = [v for v in record["valid"] if v["update"] == record.get("best_update")]
    return min(best, key=lambda v: v["nll"]) if best else record["valid"][-1]


def converged_note(records):
    """Lines saying how each run trained to convergence (``--patience``): where it stopped, its
    best update, its training time."""
    budget = records[0]["spec"]["budget"]
    lines = [
        f"Trained until the validation loss did not improve for {budget['patience']} validations in a row "
        f"(every {budget['validate_every']} updates and at every epoch end; at most {budget['updates']} updates); the test BLEU is "
        "checkpoint_best.pt's (lowest validation loss), and beside it, where measured, that of the mean of the "
        f"last checkpoints saved every {budget['validate_every']} updates (the papers average their last ones).",
        "",
        f"The same runs early in training: their validation at update {UPDATES} (where the fixed-budget claims "
        "stop), beside the best.",
        "",
        "| run | stopped at update | best update | stopped by patience | checkpoints averaged | training hours | "
        f"valid NLL / BLEU at update {UPDATES} | valid NLL / BLEU at best |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| {r['label']} | {stopped_at(r)} | {r.get('best_update')} | {stopped_by(r)} | "
            f"{averaged_range(r)} | {r.get('train_hours', '')} | "
            f"{at_fixed_budget(r)} | {nll_and_bleu(scored_validation(r))} |"
        )
    return lines + [""]


def converged_runs_by_seed(claim, by_seed):
    """Lines of a converged claim's seeds report: every run of every seed (one seed alone too),
    grouped by run in the claim's order, with where it stopped, its training time, its validation
    at update ``UPDATES`` and at its best, and its test BLEU from the best and the averaged
    checkpoints (how many, in brackets); ``by_seed``: seed -> label -> record."""
    lines = [
        f"Every run by seed: where it stopped, its training hours, its validation at update {UPDATES} and at "
        "its best checkpoint, and its test BLEU (from the averaged checkpoints: how many in brackets).",
        "",
        "| run | seed | stopped at | best update | training hours | "
        f"valid NLL / BLEU at update {UPDATES} | valid NLL / BLEU at best | test BLEU | test BLEU, averaged |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in claim.runs:
        for seed, runs in by_seed.items():
            r = runs.get(run.label)
            if r is None:
                continue
            averaged = r.get("test_bleu_averaged")
            lines.append(
                f"| {r['label']} | {seed} | {stopped_at(r)} | {r.get('best_update')} | "
                f"{number(r.get('train_hours'), 1)} | {at_fixed_budget(r)} | "
                f"{nll_and_bleu(scored_validation(r))} | {number(r.get('test_bleu'))} | "
                + ("" if averaged is None else f"{averaged:.2f} ({len(r['averaged'])})")
                + " |"
            )
    return lines


def training(record):
    """Whether the run is still training (``--report-only``: ``claim.training_record``)."""
    return record.get("status") == "training"


def unfinished(record):
    """Whether the run is training, or stopped where its run directory is gone
    (``claim.unfinished_records``)."""
    return record.get("status") in ("training", "stopped")


def health(record):
    """ "trained", "stalled" or "diverged": a finished run's status, a run still training's
    health so far (``claim.training_record``)."""
    return record.get("health", record["status"])


def status_of(record):
    """The status cell: "trained", or "training (stalled)" for a run training and stalled so far."""
    unwell = health(record) != record["status"] and health(record) != "trained"
    return f"{record['status']} ({health(record)})" if unwell else record["status"]


def stopped_at(record):
    """Where a converged run stopped: "N", or "N (training)" / "N (stopped)" for one unfinished."""
    return f"{record['updates']} ({record['status']})" if unfinished(record) else str(record["updates"])


def stopped_by(record):
    """Whether patience stopped the run: "yes", "no (cap)", "not yet" while it trains, or "no"
    for one stopped unfinished."""
    if record.get("stopped_early"):
        return "yes"
    return "not yet" if training(record) else "no" if unfinished(record) else "no (cap)"


def legend(record):
    """A run's label in a plot's legend, "(training)" or "(stopped)" added while unfinished."""
    return record["label"] + (f" ({record['status']})" if unfinished(record) else "")


def at_fixed_budget(record):
    """A converged run's validation at update ``UPDATES``, where the fixed-budget claims stop,
    as "NLL / BLEU" ("not validated" if it was not validated there)."""
    early = next((v for v in record["valid"] if v["update"] == UPDATES), None)
    return nll_and_bleu(early) if early else "not validated"


def nll_and_bleu(validation):
    """A validation as "NLL / BLEU"."""
    return f"{validation['nll']:.3f} / {number(validation['bleu'])}"


def averaged_range(record):
    """The checkpoints a converged run's averaged score is the mean of, as "N: updates A-B"."""
    from fairseq_layernorm_plugins.runs.checkpoints import checkpoint_update

    if "averaged_error" in record:
        return f"failed: {record['averaged_error']}"
    names = record.get("averaged")
    if not names:
        return "n/a"
    updates = [checkpoint_update(name) for name in names]
    return f"{len(names)}: updates {updates[0]}-{updates[-1]}" if None not in updates else ", ".join(names)


def extended_note(records):
    """Lines naming the runs that went on from a shorter run's checkpoint (``extended_from``)."""
    extended = [r for r in records if r.get("extended_from")]
    if not extended:
        return []
    earlier = ", ".join(
        f"{r['label']} ({' then '.join(str(b['updates']) for b in r['extended_from'])} updates, validated every "
        f"{' then '.join(str(b['validate_every']) for b in r['extended_from'])})"
        for r in extended
    )
    return [
        f"Went on from the checkpoint of a shorter run: {earlier}; their earlier validations are at that "
        "budget's interval, and a --patience counts from the resume.",
        "",
    ]


def _spread(values, digits=2, sign=False):
    """'mean ± sample sd' of ``values`` (the mean alone for one value)."""
    mean = sum(values) / len(values)
    text = f"{mean:{'+' if sign else ''}.{digits}f}"
    if len(values) > 1:
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        text += f" ± {sd:.{digits}f}"
    return text
