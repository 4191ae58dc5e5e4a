"""The GPU check's report (``scripts/gpu/check.py``): its parts' tables as check.md and the
training losses of parts a and d as check.png, from the report dict check.json holds."""

from pathlib import Path

from fairseq_layernorm_plugins.atomic import write_text
from fairseq_layernorm_plugins.experiments.figures import pyplot, save_figure
from fairseq_layernorm_plugins.experiments.render import number
from fairseq_layernorm_plugins.methods import COLOURS


def _training_table(records, title):
    """Markdown lines of a check part's training runs (check.json records)."""
    lines = [
        f"### {title}",
        "",
        "| method | precision | updates | first -> last train loss | finite | falling | valid loss | loss scale min / last "
        "| words/s | BLEU tok | SacreBLEU |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        if "error" in r or "not_run" in r:
            what = f"**failed**: {r['error']}" if "error" in r else f"not run ({r['not_run']})"
            lines.append(f"| {r['label']} | {r['precision']} | {r.get('updates', '')} | {what} | | | | | | | |")
            continue
        scale = f"{r['loss_scale_min']:g} / {r['loss_scale_last']:g}" if r["loss_scale"] else "n/a"
        bleu = r.get("bleu", {})
        lines.append(
            f"| {r['label']}{' (carried)' if 'carried' in r else ''} | {r['precision']} | {r['updates']} | "
            f"{number(r['first_loss'])} -> {number(r['last_loss'])} | "
            f"{'yes' if r['finite'] else '**no**'} | {'yes' if r['falling'] else '**no**'} | {number(r['valid_loss'])} | {scale} | "
            f"{number(r['wps'], 0)} | {number(bleu.get('tokenized'))} | {number(bleu.get('sacrebleu'))} |"
        )
    return lines + [""]


def omega_rows(records, tolerance):
    """The GPU check's part b: per half-precision Admin run (check.json records) the largest
    relative difference between its profiled omegas and the fp32 run's of the same seed and
    batch, and whether every omega is within ``tolerance``."""
    reference = next((r for r in records if r["part"] == "b" and "admin_profile" in r), None)
    rows = []
    for r in records:
        if r["part"] != "a" or r["method"] != "admin":
            continue
        row = {"precision": r["precision"], "reference": reference and reference["name"]}
        if "not_run" in r:
            row["not_run"] = r["not_run"]
        elif reference is None or "admin_profile" not in r:
            row["error"] = "no profile" if reference else "no fp32 reference profile"
        else:
            diffs = [
                abs(x["omega"] - y["omega"]) / abs(y["omega"])
                for stack in ("encoder", "decoder")
                for x, y in zip(r["admin_profile"][stack], reference["admin_profile"][stack])
            ]
            count = sum(len(reference["admin_profile"][s]) for s in ("encoder", "decoder"))
            row.update(
                omegas=count,
                compared=len(diffs),
                max_rel_diff=max(diffs) if diffs else None,
                equal=len(diffs) == count and max(diffs) <= tolerance,
            )
        rows.append(row)
    return rows


def _machine(facts):
    """'DATE, DEVICE (torch VERSION)' of a check's facts."""
    return f"{facts['date']}, {facts['device']} (torch {facts['torch']})"


def _benchmark_head(title, bench):
    """A part c or f benchmark's heading, then its command and whether it was not run, failed or
    carried; (lines, whether its numbers follow)."""
    lines = [f"### {title}, {bench['precision']} ({bench['device']})", ""]
    if "not_run" in bench:
        return lines + [f"not run ({bench['not_run']})", ""], False
    lines += [f"    {bench['command']}", ""]
    if "error" in bench:
        return lines + [f"**failed**: {bench['error']}", ""], False
    if "carried" in bench:
        lines += [f"Carried from the check of {_machine(bench['carried'])}.", ""]
    return lines, True


def check_report(report, tolerance):
    """check.md from the report dict (check.json); ``tolerance``: part b's relative omega tolerance."""
    facts = report["facts"]
    lines = [
        "# Mixed-precision check",
        "",
        f"Device: {facts['device']}; torch {facts['torch']} (CUDA {facts['cuda']}), Python {facts['python']}; "
        f"{facts['date']}; {report['minutes']:.1f} min.",
        "",
        "Command:",
        "",
        f"    {report['command']}",
        "",
        "Loss values: fairseq's label-smoothed loss in bits; first / last: means over the first and last quarter of the "
        "logged intervals. "
        + (
            f"BLEU on the {report['sentences']} IWSLT14-mini test lines, beam "
            f"{dict(report['budget']['generate']).get('beam', 5)}, last checkpoint."
            if report.get("sentences")
            else "BLEU (part e): not measured."
        ),
        "",
    ]
    for earlier in report.get("carried_from", []):
        lines += [f"Carried (not measured again): results of the check on {_machine(earlier)}.", ""]
    by_part = {p: [r for r in report["runs"] if r["part"] == p] for p in "abd"}
    if by_part["a"]:
        lines += _training_table(by_part["a"], "a. Every method, mixed precision")
    if report.get("omegas") is not None:
        lines += [
            "### b. Admin's omegas under half precision vs fp32",
            "",
            "| precision | omegas compared | max relative difference | equal |",
            "|---|---|---|---|",
        ]
        for row in report["omegas"]:
            if "not_run" in row:
                lines.append(f"| {row['precision']} | | not run ({row['not_run']}) | |")
                continue
            lines.append(
                f"| {row['precision']} | {row.get('compared', '')} | {number(row.get('max_rel_diff'), 8) if 'error' not in row else row['error']} | "
                f"{'yes' if row.get('equal') else '**no**'} |"
            )
        lines += ["", f"Equal means within {tolerance:g} relative.", ""]
    for bench in report.get("throughput", []):
        head, measured = _benchmark_head("c. Throughput vs fairseq `transformer`", bench)
        lines += head
        if not measured:
            continue
        lines += [
            f"Baseline: {bench.get('baseline_wps', '?')} words/s.",
            "",
            "| arch | speed ratio (median) | spread | peak memory ratio |",
            "|---|---|---|---|",
        ]
        for arch, row in bench["archs"].items():
            lines.append(
                f"| {arch} | {row['speed_ratio']:.3f} | {row['spread'][0]:.3f}-{row['spread'][1]:.3f} | {number(row['memory_ratio'], 3)} |"
            )
        lines.append("")
    if by_part["d"]:
        lines += _training_table(
            by_part["d"],
            f"d. {by_part['d'][0]['layers']}L-{by_part['d'][0]['layers']}L, {by_part['d'][0]['precision']}, same budget",
        )
    for bench in report.get("decoding", []):
        head, measured = _benchmark_head("f. Beam search with `--fused-attention`", bench)
        lines += head
        if not measured:
            continue
        lines += [
            f"fairseq's attention: {bench['stock_sentences_per_s']:.1f} sentences/s; `--fused-attention`: "
            f"speed ratio {bench['speed_ratio']:.3f} (spread {bench['spread'][0]:.3f}-{bench['spread'][1]:.3f}); "
            f"the same translation for {bench['same']} of {bench['sentences']} sentences"
            + (f", {bench['tokens_per_sentence']:.1f} tokens each." if "tokens_per_sentence" in bench else "."),
            "",
        ]
    return "\n".join(lines)


def check_files(report, out, tolerance, methods):
    """OUT/check.md (:func:`check_report`) and OUT/check.png (:func:`check_plot`); returns the markdown."""
    markdown = check_report(report, tolerance)
    write_text(Path(out) / "check.md", markdown + "\n")
    check_plot(report, Path(out) / "check.png", methods)
    return markdown


def check_plot(report, path, methods):
    """PATH (PNG): training loss per update of parts a and d, a colour per method (its index in
    ``methods``) and a line style per precision, one legend entry for each; None without
    training curves."""
    groups = [(p, [r for r in report["runs"] if r["part"] == p and r.get("train_loss")]) for p in "ad"]
    groups = [(p, rs) for p, rs in groups if rs]
    if not groups:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(groups), figsize=(6.5 * len(groups), 4.5), squeeze=False)
    styles = {"fp16": ("-", "solid"), "bf16": ("--", "dashed"), "fp32": (":", "dotted")}
    colour = lambda method: COLOURS[methods.index(method) % len(COLOURS)]
    for ax, (part, records) in zip(axes[0], groups):
        for r in records:
            ax.plot(r["train_updates"], r["train_loss"], styles[r["precision"]][0], color=colour(r["method"]))
        labels = {r["method"]: r["label"] for r in records}
        handles = [plt.Line2D([], [], color=colour(m), label=label) for m, label in labels.items()]
        ax.legend(handles=handles, fontsize=7, ncol=2 if len(handles) > 10 else 1)
        ax.set_xlabel("update")
        ax.set_ylabel("training loss (bits)")
        key = ", ".join(f"{styles[p][1]}: {p}" for p in styles if any(r["precision"] == p for r in records))
        ax.set_title(f"{'a' if part == 'a' else 'd'}. {records[0]['layers']}L-{records[0]['layers']}L ({key})")
    return save_figure(fig, path)
