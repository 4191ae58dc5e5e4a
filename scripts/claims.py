#!/usr/bin/env python
"""Each paper's headline claim at CPU scale, on Multi30k De-En, trained long enough to decide:

    python scripts/claims.py b2t --jobs 2                           # -> runs/claims/b2t.{md,json,png}
    python scripts/claims.py admin --jobs 2 --out docs/claims/admin
    python scripts/claims.py --list                                 # the claims and their runs

A claim is a handful of runs of the Multi30k recipes (configs/multi30k/<method>.yaml: each
method's own model options, initialisation, dropout and decoding) at one depth and width,
trained with the same optimizer, peak learning rate and schedule family:

* "warm-up W": linear from 1e-7 to the peak over W updates, then peak * sqrt(W / t)
  (fairseq's inverse_sqrt, the papers' Post-LN schedule);
* "no warm-up": the peak from the first update, then the same decay after update W
  (inverse_sqrt with warmup_init_lr = lr), so that the two differ only in the warm-up.

Every run is validated every ``--validate-every`` updates: loss, and greedy SacreBLEU on the
1,014 validation sentences (fairseq's ``--eval-bleu``, detokenised and cased); at the end the
last checkpoint translates test_2016_flickr with beam 5 (detokenised, cased SacreBLEU). A run
is "diverged" when its loss became NaN/inf, "stalled" when its final validation NLL is not
below the unigram entropy of the training targets, otherwise "trained".

Writes OUT.json (per run: spec, status, validation curve, final numbers), OUT.md (table and
command) and OUT.png (validation BLEU and loss against updates). Resumable: finished runs are
kept in OUT.json, an interrupted run resumes from its checkpoint_last.pt, and a run whose
spec (or the budget) changed is trained again from scratch, except that a run given more
``--updates`` (with another ``--out``: OUT.json keeps one budget) goes on from where it ended,
the schedule being the same for any budget.

To convergence: ``--patience P`` validates as above and stops a run once its validation loss
has not improved for P validations in a row (fairseq's ``--patience``, kept across resumes), with
``--updates`` as the cap; the test set is then translated by ``checkpoint_best.pt``, the
checkpoint of the lowest validation loss. ``shallow`` is the claim made for it:

    python scripts/claims.py shallow --patience 5 --validate-every 500 --updates 30000 --out docs/claims/shallow

Seeds: ``--seed N`` (N != 1) trains in RUNS/CLAIM-seedN and writes OUT-seedN.*; once runs lie
under two or more seeds, OUT-seeds.md and .png compare them (mean ± sd, differences paired by seed):

    python scripts/claims.py admin --seed 2 --runs-only "preln radam" "admin radam" --out docs/claims/admin
"""

import argparse
import json
import math
import os
import re
import shlex
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET = ("updates", "validate_every", "max_tokens", "seed")  # with each run's spec: what makes runs comparable
UNTIL_CONVERGED = ("patience",)  # part of the budget when set (> 0)


@dataclass(frozen=True)
class Run:
    """One training run of a claim: a Multi30k recipe with the claim's optimizer and schedule."""

    label: str
    method: str  # configs/multi30k/<method>.yaml
    warmup: int = 0  # 0: no warm-up (the peak at once; decay after the claim's decay_after updates)
    optimizer: str = "adam"
    model: dict = field(default_factory=dict)  # model options on top of the recipe's

    @property
    def key(self):
        return self.label.replace(" ", "_").replace("/", "-")


@dataclass(frozen=True)
class Claim:
    paper: str
    statement: str
    depth: str
    width: int
    lr: float
    decay_after: int  # the no-warm-up runs' inverse-sqrt decay starts here (the warm-up runs' W)
    runs: tuple
    baseline: str  # the run whose final validation BLEU the others are timed against
    model: dict = field(default_factory=dict)  # model options of every run (under each run's own)

    def run(self, label):
        return next(r for r in self.runs if r.label == label)


CLAIMS = {
    "preln": Claim(
        paper="Pre-LN (Xiong et al. 2020), Sec. 4.2 / Fig. 4 (Pre-LN), Sec. 3.1 / Fig. 2 (warm-up)",
        statement="Pre-LN without warm-up reaches the BLEU of Post-LN with warm-up in fewer updates; "
        "Post-LN without warm-up lags or fails.",
        depth="6L-6L",
        width=128,
        lr=1e-3,
        decay_after=300,
        runs=(
            Run("postln warm-up", "postln", warmup=300),
            Run("postln no warm-up", "postln"),
            Run("preln no warm-up", "preln"),
        ),
        baseline="postln warm-up",
    ),
    "admin": Claim(
        paper="Admin (Liu et al. 2020), Table 2 / Fig. 1",
        statement="At depth with warm-up (the Admin recipe: lr 1e-3, RAdam; Adam too), Post-LN fails or lags, "
        "Admin trains and ends at or above Pre-LN.",
        depth="12L-12L",
        width=64,
        lr=1e-3,
        decay_after=450,
        runs=tuple(
            Run(f"{method} {optimizer}", method, warmup=450, optimizer=optimizer)
            for optimizer in ("radam", "adam")
            for method in ("postln", "preln", "admin")
        ),
        baseline="preln radam",
    ),
    "tfixup": Claim(
        paper="T-Fixup (Huang et al. 2020), Sec. 5",
        statement="A deep model without any LayerNorm trains without warm-up (T-Fixup's initialisation); "
        "Post-LN without warm-up does not.",
        depth="18L-18L",
        width=64,
        lr=5e-4,
        decay_after=300,
        runs=(
            Run("tfixup no warm-up", "tfixup"),
            Run("postln no warm-up", "postln"),
            Run("preln no warm-up", "preln"),
        ),
        baseline="preln no warm-up",
    ),
    "b2t": Claim(
        paper="B2T connection (Takase et al. 2023), Table 2 (18L-18L)",
        statement="At 18L-18L with warm-up, Post-LN fails while B2T trains and ends at or above Pre-LN; "
        "B2T without LayerNorm trains.",
        depth="18L-18L",
        width=64,
        lr=1e-3,
        decay_after=300,
        runs=(
            Run("b2t", "b2t", warmup=300),
            Run("preln", "preln", warmup=300),
            Run("postln", "postln", warmup=300),
            # the paper's w/o-LN scales alone give logits of std ~160 at d=64 (docs/claims.md); the
            # authors' released code also rescales every non-LN weight by N^-0.5 whenever B2T is on
            Run(
                "b2t w/o LN, rescaled", "b2t", warmup=300, model={"b2t_no_layer_norm": True, "b2t_weight_rescale": True}
            ),
        ),
        baseline="preln",
        # the paper's models, its baselines too, come from the authors' fork, which initialises
        # as fairseq 0.12 does (nn.Linear FFN); docs/claims/b2t-init-paper.* has Xavier-FFN runs
        model={"init_style": "fairseq"},
    ),
}


CLAIMS["shallow"] = Claim(
    paper="Admin (Liu et al. 2020), Table 2 (6L-6L: Post-LN 35.64, Pre-LN 35.50 on IWSLT14); "
    "B2T (Takase et al. 2023), Sec. 3 / Table 2 (6L-6L: Post-LN above Pre-LN)",
    statement="At 6L-6L, trained until validation stops improving, Post-LN ends at or above Pre-LN; "
    "Admin, B2T and T-Fixup end level with Post-LN.",
    depth="6L-6L",
    width=128,
    lr=1e-3,
    decay_after=500,
    runs=(
        Run("postln", "postln", warmup=500),
        Run("preln", "preln", warmup=500),
        Run("admin", "admin", warmup=500),
        Run("b2t", "b2t", warmup=500),
        Run("tfixup no warm-up", "tfixup"),  # the authors' recipe: no warm-up
    ),
    baseline="preln",
)


def run_recipe(claim, run, args):
    """The run's Recipe: configs/multi30k/<method>.yaml at the claim's depth, width, optimizer
    and schedule, for ``args.updates`` updates."""
    from fairseq_layernorm_plugins.recipes.config import Recipe, load_recipe, merge

    recipe = load_recipe(f"multi30k/{run.method}")
    warmup = run.warmup or claim.decay_after
    schedule = {"_name": "inverse_sqrt", "warmup_updates": warmup, "warmup_init_lr": 1e-7 if run.warmup else claim.lr}
    width = claim.width
    data = merge(
        recipe.data,
        {
            "depths": {claim.depth: {}},
            "tokens_per_update": args.max_tokens,
            # a stalled model writes to the length limit: keep its decoding short
            "generate": {
                "beam": 5,
                "average_last": 1,
                **({"checkpoint": "best"} if args.patience else {}),  # the lowest validation loss
                "extra": ["--max-len-a", "1.2", "--max-len-b", "10"],
            },
            "fairseq": {
                "optimizer": {"_name": run.optimizer, "adam_betas": "(0.9, 0.98)", "weight_decay": 0.0001},
                "optimization": {"lr": [claim.lr], "max_update": args.updates, "max_epoch": 0},
                "dataset": {"max_tokens": args.max_tokens},
                "model": {
                    "encoder_embed_dim": width,
                    "decoder_embed_dim": width,
                    "encoder_ffn_embed_dim": 4 * width,
                    "decoder_ffn_embed_dim": 4 * width,
                    "encoder_attention_heads": 4,
                    "decoder_attention_heads": 4,
                    **claim.model,
                    **({"init_style": args.init_style} if args.init_style else {}),
                    **run.model,
                },
                "common": {"log_interval": 25},
            },
        },
    )
    data["fairseq"]["lr_scheduler"] = schedule  # the recipe's whole schedule replaced (e.g. T-Fixup's decay_period)
    return Recipe(recipe.name, recipe.path, data).with_depth(claim.depth)


def run_spec(claim, run, args):
    """(Recipe, spec): the spec is everything that decides the run's outcome (the run, its claim's
    settings and the budget, the fairseq options); a run made with another spec is trained again."""
    recipe = run_recipe(claim, run, args)  # its fairseq options hold the claim's depth, width, lr and schedule
    return recipe, {"run": asdict(run), "claim": args.claim, "budget": budget(args), "fairseq": recipe.fairseq}


def extends(previous, spec):
    """Whether ``spec`` is ``previous`` trained for more updates: the same run in all else, under a
    schedule that does not depend on the budget (inverse_sqrt), so that resuming the shorter run
    trains the longer one."""

    def without_updates(s):
        return {
            **s,
            "budget": {**s["budget"], "updates": None},
            "fairseq": {**s["fairseq"], "optimization": {**s["fairseq"]["optimization"], "max_update": None}},
        }

    return (
        spec["budget"]["updates"] > previous["budget"]["updates"]
        and spec["fairseq"]["lr_scheduler"]["_name"] == "inverse_sqrt"
        and without_updates(previous) == without_updates(spec)
    )


def eval_bleu_flags(every):
    """fairseq-train flags for validation every ``every`` updates with greedy, detokenised, cased
    SacreBLEU on the validation set (the data is SentencePiece over untokenised text)."""
    return [
        "--validate-interval-updates",
        str(every),
        "--save-interval-updates",
        str(every),
        "--keep-interval-updates",
        "1",
        "--eval-bleu",
        "--eval-bleu-args",
        json.dumps({"beam": 1, "max_len_a": 1.2, "max_len_b": 10}),
        "--eval-bleu-detok",
        "space",
        "--eval-bleu-remove-bpe",
        "sentencepiece",
        "--no-progress-bar",
    ]


def train_run(claim, run, args):
    """Train (or resume) and evaluate one run; returns its record for OUT.json."""
    from fairseq_layernorm_plugins.atomic import write_json
    from fairseq_layernorm_plugins.recipes.evaluate import evaluate
    from fairseq_layernorm_plugins.recipes.launch import Launch, data_bin, train
    from fairseq_layernorm_plugins.recipes.report import read_log_curves, unigram_bits

    recipe, spec = run_spec(claim, run, args)
    run_dir = claim_dir(args) / run.key
    spec_file = run_dir / "spec.json"
    previous = json.loads(spec_file.read_text()) if spec_file.exists() else spec
    if previous != spec and extends(previous, spec) and (run_dir / "checkpoints" / "checkpoint_last.pt").exists():
        print(
            f"[{run.label}] budget extended from {previous['budget']['updates']} to {args.updates} updates: "
            "resuming from its last checkpoint",
            flush=True,
        )
    elif previous != spec:
        print(f"[{run.label}] spec changed: training again from scratch", flush=True)
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(spec_file, spec)
    launch = Launch(
        recipe,
        str(data_bin(args.data, recipe, REPO)),
        str(run_dir / "checkpoints"),
        cpu_workers=1,
        seed=args.seed,
        extra=eval_bleu_flags(args.validate_every) + (["--patience", str(args.patience)] if args.patience else []),
    )
    start = time.time()
    record = {"label": run.label, "method": run.method, "optimizer": run.optimizer, "warmup": run.warmup, "spec": spec}
    try:
        train(launch, run_dir)
        test = evaluate(run_dir, echo=lambda *a: None)["bleu"]["sacrebleu"]["score"]
    except RuntimeError as err:  # fairseq stops on NaN/inf losses
        record["error"], test = str(err).splitlines()[0], 0.0
    curves = read_log_curves(run_dir / "train.log")
    valid = [{"update": v["update"], "nll": v["nll_loss"], "bleu": v["bleu"]} for v in curves["valid"]]
    final_nll = valid[-1]["nll"] if valid and "error" not in record else float("nan")
    status = (
        "diverged"
        if not math.isfinite(final_nll)
        else "stalled"
        if final_nll >= unigram_bits(args.data_dir)
        else "trained"
    )
    record.update(
        status=status,
        valid=valid,
        train_loss=[(p["update"], p["loss"]) for p in curves["train"]],
        test_bleu=test,
        updates=curves["end"]["update"],
        minutes=round((time.time() - start) / 60, 2),  # this call's, evaluation included
        train_hours=round(curves["end"]["wall"] / 3600, 2),  # fairseq's wall clock, kept across resumes
    )
    if args.patience:
        best = min(curves["valid"], key=lambda v: v["loss"], default=None)  # fairseq's checkpoint_best.pt
        stopped = "early stop since valid performance" in (run_dir / "train.log").read_text(errors="replace")
        record.update(best_update=best and best["update"], stopped_early=stopped)
    return record


def claim_dir(args, seed=None):
    """RUNS/CLAIM, or RUNS/CLAIM-init-STYLE with ``--init-style``, then ``-seedN`` for a seed
    (``args.seed`` unless given) other than 1, so that seeds never overwrite each other's runs."""
    path = Path(args.runs) / (args.claim + (f"-init-{args.init_style}" if args.init_style else ""))
    return seed_path(path, args.seed if seed is None else seed)


def seed_path(path, seed):
    """``path`` for seed 1 (a claim's first run), ``path-seedN`` for the others."""
    return path if seed == 1 else path.with_name(f"{path.name}-seed{seed}")


def seed_results(out):
    """{seed: results} of every seed whose OUT.json (seed 1) or OUT-seedN.json lies beside OUT."""
    out = Path(out)
    name = re.compile(re.escape(out.name) + r"(-seed[0-9]+)?\.json")
    files = [f for f in sorted(out.parent.glob(f"{out.name}*.json")) if name.fullmatch(f.name)]
    return {r["budget"]["seed"]: r for r in map(json.loads, map(Path.read_text, files))}


def budget(args):
    return {name: getattr(args, name) for name in BUDGET} | {
        name: getattr(args, name) for name in UNTIL_CONVERGED if getattr(args, name, 0)
    }


def first_update_reaching(record, bleu):
    """The first validated update whose BLEU is at least ``bleu`` (None if none)."""
    return next((v["update"] for v in record["valid"] if v["bleu"] is not None and v["bleu"] >= bleu), None)


def render(claim_name, records, commands, out, unigram):
    """OUT.md (table: status, final validation NLL and BLEU, updates to the baseline's final
    validation BLEU, test BLEU) and OUT.png (validation BLEU and NLL against updates)."""
    from fairseq_layernorm_plugins import models  # noqa: F401  (registers every method)
    from fairseq_layernorm_plugins.atomic import atomic_path, write_text
    from fairseq_layernorm_plugins.methods import METHODS
    from fairseq_layernorm_plugins.recipes.report import pyplot

    claim = CLAIMS[claim_name]
    order = [r.label for r in claim.runs]
    records = sorted(records, key=lambda r: order.index(r["label"]))
    base = next((r for r in records if r["label"] == claim.baseline and r["valid"]), None)
    target = base["valid"][-1]["bleu"] if base else None
    inits = sorted({r["spec"]["fairseq"]["model"].get("init_style", "(arch default)") for r in records})
    lines = [
        f"### {claim_name}: {claim.paper}",
        "",
        f"Claim: {claim.statement}",
        "",
        "Made by:",
        "",
        *[f"    {c}" for c in commands],
        "",
        f"Multi30k De-En, {claim.depth}, d={claim.width} (FFN {4 * claim.width}, 4 heads), peak lr {claim.lr:g}, "
        f"no-warm-up runs decay after update {claim.decay_after}; validation: greedy SacreBLEU on 1,014 sentences; "
        f"test: beam 5, SacreBLEU on test_2016_flickr. Stalled = final validation NLL not below the unigram "
        f"entropy of the training targets ({unigram:.2f} bits). Initialisation (`--init-style`): {', '.join(inits)}.",
        "",
        *(converged_note(records) if any("stopped_early" in r for r in records) else []),
        "| run | optimizer | warm-up | status | final valid NLL | final valid BLEU | best valid BLEU | "
        f"updates to {target if target is None else f'{target:.1f}'} valid BLEU ({claim.baseline}) | test BLEU |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        last = r["valid"][-1] if r["valid"] else {"nll": float("nan"), "bleu": None}
        best = max((v["bleu"] for v in r["valid"] if v["bleu"] is not None), default=None)
        reach = first_update_reaching(r, target) if target is not None else None
        lines.append(
            f"| {r['label']} | {r['optimizer']} | {r['warmup'] or 'none'} | {r['status']} | {last['nll']:.3f} | "
            f"{_fmt(last['bleu'])} | {_fmt(best)} | {reach if reach is not None else 'not reached'} | "
            f"{r['test_bleu']:.2f} |"
        )

    plt = pyplot()
    fig, (ax_bleu, ax_nll) = plt.subplots(1, 2, figsize=(11, 4))
    styles = ("-", "--", ":", "-.")
    for r in records:
        colour = METHODS[r["method"]].colour
        style = styles[
            (0 if r["optimizer"] == "adam" else 1)
            + (2 if r["label"].endswith("no warm-up") or "w/o" in r["label"] else 0)
        ]
        updates = [v["update"] for v in r["valid"]]
        ax_bleu.plot(updates, [v["bleu"] or 0.0 for v in r["valid"]], style, color=colour, label=r["label"], marker=".")
        ax_nll.plot(updates, [v["nll"] for v in r["valid"]], style, color=colour, label=r["label"], marker=".")
    if target is not None:
        ax_bleu.axhline(target, color="grey", lw=0.6)
    ax_nll.axhline(unigram, color="grey", lw=0.6, ls=":", label="unigram entropy")
    ax_bleu.set(xlabel="updates", ylabel="validation BLEU (greedy)", title=f"{claim_name}: {claim.depth}")
    ax_nll.set(xlabel="updates", ylabel="validation NLL (bits/token)", title="validation NLL")
    ax_nll.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(f"{out}.png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    write_text(f"{out}.md", "\n".join(lines) + "\n")
    return "\n".join(lines)


def render_seeds(claim_name, first):
    """FIRST-seeds.md and .png, once runs of the claim are made under more than one seed (FIRST is
    seed 1's OUT): per run, its test BLEU per seed, mean and sample standard deviation of test BLEU,
    final validation NLL and BLEU, and its test BLEU minus the baseline's, paired by seed (same
    seed: same data order). Returns the markdown, or None with fewer than two seeds."""
    from fairseq_layernorm_plugins.atomic import atomic_path, write_text
    from fairseq_layernorm_plugins.methods import METHODS
    from fairseq_layernorm_plugins.recipes.report import pyplot

    claim = CLAIMS[claim_name]
    by_seed = {seed: {r["label"]: r for r in res["runs"]} for seed, res in sorted(seed_results(first).items())}
    if len(by_seed) < 2:
        return None
    table = {
        run.label: {seed: runs[run.label] for seed, runs in by_seed.items() if run.label in runs} for run in claim.runs
    }
    table = {label: seeds for label, seeds in table.items() if len(seeds) > 1}
    base = table.get(claim.baseline, {})
    lines = [
        f"### {claim_name} over seeds: {claim.paper}",
        "",
        f"Each run as in {Path(first).name}.md, trained again with other `--seed`s (initialisation, dropout and "
        f"data order). Mean ± sample standard deviation over seeds; the difference from {claim.baseline} is "
        "paired by seed.",
        "",
        "| run | seeds | test BLEU per seed | test BLEU | final valid NLL | final valid BLEU | "
        f"test BLEU − {claim.baseline}, per seed | mean difference |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, seeds in table.items():
        final = [r["valid"][-1] if r["valid"] else {"nll": float("nan"), "bleu": None} for r in seeds.values()]
        diffs = [r["test_bleu"] - base[seed]["test_bleu"] for seed, r in seeds.items() if seed in base]
        paired = label != claim.baseline and len(diffs) > 1
        per_seed = ", ".join(f"{r['test_bleu']:.2f}" for r in seeds.values())
        lines.append(
            f"| {label} | {', '.join(map(str, seeds))} | {per_seed} | "
            f"{_spread([r['test_bleu'] for r in seeds.values()])} | {_spread([f['nll'] for f in final], 3)} | "
            f"{_spread([f['bleu'] or 0.0 for f in final])} | "
            f"{', '.join(f'{d:+.2f}' for d in diffs) if paired else ''} | {_spread(diffs, sign=True) if paired else ''} |"
        )

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, value, name in zip(
        axes, (lambda r: r["test_bleu"], lambda r: r["valid"][-1]["nll"]), ("test BLEU", "final validation NLL (bits)")
    ):
        for x, seeds in enumerate(table.values()):
            values = [value(r) for r in seeds.values() if r["valid"]]
            colour = METHODS[next(iter(seeds.values()))["method"]].colour
            ax.scatter([x] * len(values), values, color=colour, s=18)
            ax.hlines(sum(values) / len(values), x - 0.25, x + 0.25, color=colour)
        ax.set_xticks(range(len(table)), list(table), rotation=20, fontsize=8)
        ax.set(ylabel=name, title=f"{claim_name}: {claim.depth}, {len(by_seed)} seeds")
    fig.tight_layout()
    with atomic_path(f"{first}-seeds.png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    write_text(f"{first}-seeds.md", "\n".join(lines) + "\n")
    return "\n".join(lines)


def converged_note(records):
    """Lines saying how each run trained to convergence (``--patience``): where it stopped, its
    best update, its training time."""
    budget = records[0]["spec"]["budget"]
    lines = [
        f"Trained until the validation loss did not improve for {budget['patience']} validations in a row "
        f"(every {budget['validate_every']} updates; at most {budget['updates']}); the test BLEU is "
        "checkpoint_best.pt's (lowest validation loss).",
        "",
        "| run | stopped at update | best update | stopped by patience | training hours |",
        "|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| {r['label']} | {r['updates']} | {r.get('best_update')} | {'yes' if r.get('stopped_early') else 'no (cap)'} | "
            f"{r.get('train_hours', '')} |"
        )
    return lines + [""]


def _spread(values, digits=2, sign=False):
    """'mean ± sample sd' of ``values`` (the mean alone for one value)."""
    mean = sum(values) / len(values)
    text = f"{mean:{'+' if sign else ''}.{digits}f}"
    if len(values) > 1:
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        text += f" ± {sd:.{digits}f}"
    return text


def _fmt(value):
    return "" if value is None else f"{value:.2f}"


def main(argv=None):
    from fairseq_layernorm_plugins.atomic import write_json

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("claim", nargs="?", choices=sorted(CLAIMS))
    parser.add_argument("--list", action="store_true", help="print the claims and their runs, and exit")
    parser.add_argument("--runs-only", nargs="+", metavar="LABEL", help="train only these runs of the claim")
    parser.add_argument("--updates", type=int, default=2000, help="updates per run (default 2000)")
    parser.add_argument("--validate-every", type=int, default=200, help="validate every N updates (default 200)")
    parser.add_argument(
        "--patience",
        type=int,
        default=0,
        help="train until the validation loss has not improved for P validations (fairseq's --patience), "
        "--updates at most, and score checkpoint_best.pt (default 0: train --updates, score the last)",
    )
    parser.add_argument("--max-tokens", type=int, default=2048, help="tokens per update (default 2048)")
    parser.add_argument(
        "--seed", type=int, default=1, help="fairseq's --seed; other than 1: RUNS/CLAIM-seedN and OUT-seedN (default 1)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs trained at once, each with cores / JOBS threads")
    parser.add_argument(
        "--data-dir", default=str(REPO / "data" / "multi30k.de-en"), help="prepared Multi30k (prepared if missing)"
    )
    parser.add_argument(
        "--test-lines", type=int, default=0, help="prepare the test set as N evenly spaced lines (default 0: all)"
    )
    parser.add_argument(
        "--init-style",
        choices=("paper", "fairseq"),
        help="start every run of the claim from this initialisation (see --init-style of the archs) instead of "
        "the claim's own; run directories go to RUNS/CLAIM-init-STYLE/",
    )
    parser.add_argument("--runs", default=str(REPO / "runs" / "claims"), help="run directories go to RUNS/CLAIM/")
    parser.add_argument("--out", help="writes OUT.md, OUT.png, OUT.json (default: RUNS/CLAIM)")
    args = parser.parse_args(argv)
    if args.list or not args.claim:
        for name, claim in CLAIMS.items():
            every = f", every run {claim.model}" if claim.model else ""
            print(f"{name}: {claim.paper}, {claim.depth} d={claim.width} lr {claim.lr:g}{every}\n  {claim.statement}")
            for run in claim.runs:
                print(
                    f"  - {run.label}: {run.method}, {run.optimizer}, warm-up {run.warmup or 'none'} {run.model or ''}"
                )
        return
    claim = CLAIMS[args.claim]
    unknown = set(args.runs_only or ()) - {r.label for r in claim.runs}
    if unknown:
        parser.error(f"{args.claim} has no run(s) {sorted(unknown)}; see --list")
    args.data = args.data_dir
    first = Path(args.out) if args.out else claim_dir(args, seed=1)  # seed 1's OUT; seed N's is FIRST-seedN
    out = seed_path(first, args.seed)

    from fairseq_layernorm_plugins.prepare.multi30k import default_raw_dir, prepare
    from fairseq_layernorm_plugins.prepare.textio import DataError
    from fairseq_layernorm_plugins.recipes.report import unigram_bits

    try:
        # as the main job prepares it, so that the two share one data directory
        prepare(
            args.data_dir,
            raw_dir=default_raw_dir(),
            download_dir=str(REPO / "data" / "downloads"),
            test_lines=args.test_lines or None,
        )
    except DataError as err:
        sys.exit(f"error: {err}")
    results = Path(f"{out}.json")
    previous = (
        json.loads(results.read_text()) if results.exists() else {"commands": [], "budget": budget(args), "runs": []}
    )
    if previous["budget"] != budget(args):
        sys.exit(f"error: {results} holds runs made with {previous['budget']}, not {budget(args)}; use another --out")
    specs = {run.label: run_spec(claim, run, args)[1] for run in claim.runs}
    done = {r["label"]: r for r in previous["runs"] if r["label"] in specs and r.get("spec") == specs[r["label"]]}
    command = shlex.join(["python", "scripts/claims.py", *(argv if argv is not None else sys.argv[1:])])
    commands = previous["commands"] + ([command] if command not in previous["commands"] else [])
    wanted = [r for r in claim.runs if not args.runs_only or r.label in args.runs_only]
    todo = [r for r in wanted if r.label not in done]
    print(
        f"{args.claim}: {len(wanted) - len(todo)} of {len(wanted)} runs done; training {len(todo)}, {args.jobs} at once"
    )
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.jobs)))  # inherited by fairseq
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with ThreadPoolExecutor(args.jobs) as pool:  # each run is a fairseq subprocess; threads only wait
        futures = {pool.submit(train_run, claim, run, args): run for run in todo}
        for n, future in enumerate(as_completed(futures), 1):
            record = future.result()
            done[record["label"]] = record
            last = record["valid"][-1] if record["valid"] else {}
            print(
                f"[{n}/{len(todo)}] {record['label']}: {record['status']}, valid NLL {last.get('nll', float('nan')):.3f}, "
                f"valid BLEU {_fmt(last.get('bleu'))}, test BLEU {record['test_bleu']:.2f} ({record['minutes']} min)",
                flush=True,
            )
            write_json(results, {"commands": commands, "budget": budget(args), "runs": list(done.values())})
    print(render(args.claim, list(done.values()), commands, out, unigram_bits(args.data_dir)))
    print(f"wrote {out}.md, .png, .json ({(time.time() - start) / 60:.1f} min for {len(todo)} runs)")
    seeds = render_seeds(args.claim, first)
    if seeds:
        print(f"{seeds}\nwrote {first}-seeds.md, .png")


if __name__ == "__main__":
    main()
