"""A paper's claim at CPU scale, tested by a handful of training runs (``configs/claims.yaml``
defines the claims, ``scripts/claims.py`` runs them): runs of the Multi30k recipes (``configs/multi30k/<method>.yaml``; a
language-model claim's: ``configs/wikitext2/``) at one depth (or one per run) and width,
trained with the same optimizer, peak learning rate and schedule family, each in
RUNS/CLAIM/<run> beside the spec that decides its outcome (``experiment.open_run_dir``).

A run's record (OUT.json) holds its spec, status (``curves.status``), validation curve
(NLL and greedy BLEU per validation; a language model's NLL and perplexity), test BLEU (a
language model's test perplexity), updates and training time. ``args`` below are
``scripts/claims.py``'s options.
"""

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fairseq_layernorm_plugins.atomic import write_json
from fairseq_layernorm_plugins.experiments import experiment
from fairseq_layernorm_plugins.experiments.curves import read_log_curves, unigram_bits
from fairseq_layernorm_plugins.experiments.curves import status as health_of
from fairseq_layernorm_plugins.recipes import specs

LANGUAGE_MODEL_CORPORA = ("wikitext2",)
BUDGET = ("updates", "validate_every", "max_tokens", "seed")  # with each run's spec: what makes runs comparable
UNTIL_CONVERGED = ("patience",)  # part of the budget when set (> 0)
UPDATES = 2000  # a claim's fixed budget (claims.py --updates), where the early-training findings are read
# a converged run is scored by checkpoint_best.pt and, as the papers score theirs, by the mean of its
# last checkpoints: the last 5 of every --validate-every updates (10 epochs on Multi30k at 500; Admin and
# B2T average their last 10 epochs)
AVERAGE_LAST = 5
LOG_INTERVAL = 25  # updates between fairseq's training log lines (train_inner: loss, fp16's loss scale)


@dataclass(frozen=True)
class Run:
    """One training run of a claim: a Multi30k recipe with the claim's optimizer and schedule."""

    label: str
    method: str  # configs/<corpus>/<method>.yaml
    warmup: int = 0  # 0: no warm-up (the peak at once; decay after the claim's decay_after updates)
    optimizer: str = "adam"
    model: dict = field(default_factory=dict)  # model options on top of the recipe's
    depth: str | None = None  # default: the claim's

    @property
    def key(self):
        return self.label.replace(" ", "_").replace("/", "-")


@dataclass(frozen=True)
class Claim:
    """A paper's claim and the runs that test it, at one depth and width (FFN 4 x width, 4
    heads), one peak learning rate and schedule family."""

    paper: str
    statement: str
    depth: str
    width: int
    lr: float
    decay_after: int  # the no-warm-up runs' inverse-sqrt decay starts here (the warm-up runs' W)
    runs: tuple
    baseline: str  # the run whose final validation BLEU the others are timed against
    also_against: tuple = ()  # runs the seeds report also pairs every run against, as the baseline
    model: dict = field(default_factory=dict)  # model options of every run (under each run's own)
    corpus: str = "multi30k"  # the recipes' folder: multi30k (translation) or wikitext2 (language models)

    def __post_init__(self):
        labels = {run.label for run in self.runs}
        unknown = [label for label in self.also_against if label not in labels]
        if unknown:
            raise ValueError(f"claim {self.statement[:40]!r}: no run labelled {', '.join(map(repr, unknown))}")

    @property
    def language_model(self):
        return self.corpus in LANGUAGE_MODEL_CORPORA

    def run(self, label):
        return next(r for r in self.runs if r.label == label)


def load_claims(path=None):
    """{name: Claim} of ``path`` (default: configs/claims.yaml). A claim's ``runs`` are listed, or
    ``runs_of: {methods: [...], label: "{method} ...", **Run fields}`` makes one run per method
    (a list among the methods, a YAML alias of one, counts as its methods)."""
    import yaml

    path = Path(path or experiment.REPO / "configs" / "claims.yaml")
    claims = {}
    for name, spec in yaml.safe_load(path.read_text(encoding="utf-8"))["claims"].items():
        spec = dict(spec)
        if "runs_of" in spec:
            template = dict(spec.pop("runs_of"))
            label = template.pop("label")
            methods = [m for item in template.pop("methods") for m in (item if isinstance(item, list) else [item])]
            spec["runs"] = [{"label": label.format(method=m), "method": m, **template} for m in methods]
        spec["runs"] = tuple(Run(**run) for run in spec["runs"])
        spec["also_against"] = tuple(spec.get("also_against", ()))
        try:
            claims[name] = Claim(**spec)
        except TypeError as err:  # an unknown or missing field
            raise ValueError(f"{path}: claim {name!r}: {err}") from None
    return claims


def run_recipe(claim, run, args):
    """The run's Recipe: configs/<corpus>/<method>.yaml at the run's (or claim's) depth, the
    claim's width, optimizer and schedule, for ``args.updates`` updates."""
    warmup = run.warmup or claim.decay_after
    schedule = {"_name": "inverse_sqrt", "warmup_updates": warmup, "warmup_init_lr": 1e-7 if run.warmup else claim.lr}
    model = {**claim.model, **({"init_style": args.init_style} if args.init_style else {}), **run.model}
    decay = {}
    if claim.language_model:  # scored by perplexity, from the recipe's checkpoint_best.pt; no weight decay (B2T's LMs)
        stacks, generate, decay = ("decoder",), {}, {"weight_decay": 0.0}
    else:  # a stalled model writes to the length limit: keep its decoding short
        stacks, generate = (
            ("encoder", "decoder"),
            {
                "beam": 5,
                "average_last": 1,
                **({"checkpoint": "best"} if args.patience else {}),  # the lowest validation loss
                "extra": ["--max-len-a", "1.2", "--max-len-b", "10"],
            },
        )
    return experiment.scaled_recipe(
        f"{claim.corpus}/{run.method}",
        run.depth or claim.depth,
        experiment.model_size(claim.width, stacks=stacks),
        updates=args.updates,
        tokens=args.max_tokens,
        lr=[claim.lr],
        log_interval=LOG_INTERVAL,
        generate=generate,
        overrides={
            "fairseq": {
                "optimizer": experiment.adam(run.optimizer) | decay,
                "optimization": {"max_epoch": 0},
                "model": model,
            }
        },
        schedule=schedule,  # the recipe's whole schedule replaced (e.g. T-Fixup's decay_period)
    )


def precision(args):
    """The precision every run of the claim trains in (``--precision``; fp32 unless given)."""
    return getattr(args, "precision", None) or "fp32"


def device(args):
    """Where every run of the claim trains and decodes: "cpu" (one process; ``--device``'s default)
    or "cuda" (one GPU each, ``--jobs`` runs sharing it)."""
    return getattr(args, "device", None) or "cpu"


def devices(run_dir, now):
    """Every device the run in ``run_dir`` has trained on, in order, ``now`` last (RUN/devices.json,
    kept across resumes; a run begun before it was kept: the device of its later calls)."""
    seen = devices_so_far(run_dir)
    seen += [] if seen[-1:] == [now] else [now]
    write_json(Path(run_dir) / "devices.json", seen)
    return seen


def devices_so_far(run_dir):
    """The devices the run in ``run_dir`` has trained on, in order (RUN/devices.json; [] if none)."""
    path = Path(run_dir) / "devices.json"
    return json.loads(path.read_text()) if path.exists() else []


def run_spec(claim, run, args):
    """(Recipe, spec): the spec is everything that decides the run's outcome (the run, its claim's
    settings and the budget, the fairseq options, a precision other than fp32); a run made with
    another spec is trained again (with its architecture's defaults recorded: ``specs.recorded``)."""
    recipe = run_recipe(claim, run, args)  # its fairseq options hold the claim's depth, width, lr and schedule
    fields = {key: value for key, value in asdict(run).items() if key != "depth" or value}  # as before depth existed
    spec = {"run": fields, "claim": args.claim, "budget": budget(args), "fairseq": recipe.fairseq}
    spec |= {"precision": precision(args)} if precision(args) != "fp32" else {}
    return recipe, specs.recorded(spec)


def train_run(claim, run, args):
    """Train (or resume) and evaluate one run; returns its record for OUT.json."""
    recipe, spec = run_spec(claim, run, args)
    run_dir = experiment.open_run_dir(claim_dir(args) / run.key, spec, run.label)
    averaging = bool(args.patience) and not claim.language_model
    extra = experiment.validation_flags(
        args.validate_every, args.patience, bleu=not claim.language_model, keep=AVERAGE_LAST if averaging else 1
    )
    on_cpu = device(args) == "cpu"
    trained_on = devices(run_dir, device(args))
    outcome = experiment.train_and_test(
        recipe, run_dir, args.data_dir, args.seed, extra, precision=precision(args), cpu_workers=int(on_cpu)
    )
    record = run_record(claim, run, spec, run_dir, outcome.curves, "+".join(trained_on))
    record.update({"error": outcome.error} if outcome.error else {})
    record.update(
        status=outcome.status(unigram_of(claim, args.data_dir)),
        **{score_key(claim): outcome.score},
        minutes=outcome.minutes,  # this call's, evaluation included
    )
    if averaging and not outcome.error:
        record.update(averaged_score(run_dir, cpu=on_cpu))
    return record


def training_record(claim, run, args):
    """The record of a run still training, for ``--report-only``: its curves so far from
    RUNS/CLAIM/<run>/train.log, status "training" ("ended, not scored" once patience or the
    budget stopped it; a run whose process was killed stays "training"), its health so far
    (``curves.status`` of its last validation: "trained", "stalled" or "diverged"), no test score; None
    where the run directory holds no validation of this run (none, or a run made with another
    spec, a shorter budget's included, which ``train_run`` would go on with or replace)."""
    _, spec = run_spec(claim, run, args)
    run_dir = claim_dir(args) / run.key
    made = run_dir / "spec.json"
    if not made.is_file() or not (run_dir / "train.log").is_file():
        return None
    if not specs.same_run(json.loads(made.read_text()), spec):
        return None
    curves = read_log_curves(run_dir / "train.log")
    if not curves["valid"]:
        return None
    record = run_record(claim, run, spec, run_dir, curves, "+".join(devices_so_far(run_dir)) or "cpu")
    ended = record.get("stopped_early") or record["updates"] >= args.updates
    health = health_of(curves["valid"][-1]["nll_loss"], unigram_of(claim, args.data_dir))
    return record | {"status": "ended, not scored" if ended else "training", "health": health, score_key(claim): None}


def unfinished_records(claim, runs, args, out, done=()):
    """The records of ``runs`` (begun, not finished) for ``--report-only``: each one's
    :func:`training_record` or, where its run directory no longer holds it, its record as last
    reported, "training" becoming "stopped" (such a run trains again from scratch). Keeps them
    in OUT-unfinished.json (beside the records of other runs reported there before, those in
    ``done``, the finished runs' labels, left out; removed once none is left), so that where a
    run stood outlives its run directory."""
    path = Path(f"{out}-unfinished.json")
    kept = {r["label"]: r for r in (json.loads(path.read_text())["runs"] if path.exists() else [])}
    records = []
    for run in runs:
        record, earlier = training_record(claim, run, args), kept.pop(run.label, None)
        if record is None and earlier and specs.same_run(earlier["spec"], run_spec(claim, run, args)[1]):
            record = earlier | ({"status": "stopped"} if earlier["status"] == "training" else {})
        records += [record] if record else []
    others = [r for label, r in kept.items() if label not in done]
    if records or others:
        write_json(path, {"budget": budget(args), "runs": records + others})
    else:
        path.unlink(missing_ok=True)
    return records


def score_key(claim):
    """The record's test score: "test_bleu", a language model's "test_ppl"."""
    return "test_ppl" if claim.language_model else "test_bleu"


def run_record(claim, run, spec, run_dir, curves, trained_on):
    """A run's record from its train.log's ``curves`` (``curves.read_log_curves``): what it is,
    where it trained, its validation and training curves, how far and how long it trained and,
    with ``--patience``, its best update so far and whether patience stopped it."""
    record = {"label": run.label, "method": run.method, "optimizer": run.optimizer, "warmup": run.warmup, "spec": spec}
    record.update(device=trained_on)  # not in the spec (a record without it: cpu)
    record.update({"depth": run.depth} if run.depth else {})
    record.update({"extended_from": earlier} if (earlier := experiment.extended_from(run_dir)) else {})
    valid = [{"update": v["update"], "nll": v["nll_loss"], "bleu": v["bleu"]} for v in curves["valid"]]
    record.update(
        valid=[{**v, "ppl": 2 ** v["nll"]} for v in valid] if claim.language_model else valid,
        train_loss=[(p["update"], p["loss"]) for p in curves["train"]],
        updates=curves["end"]["update"],
        # fairseq's wall clock, kept across resumes by _compat's wall_resume (resumed from a checkpoint saved
        # without it, the time since that resume)
        train_hours=round(curves["end"]["wall"] / 3600, 2),
    )
    scales = [(p["update"], p["loss_scale"]) for p in curves["train"] if p.get("loss_scale") is not None]  # --fp16
    if scales:
        record.update(
            loss_scale_min=min(s for _, s in scales),
            loss_scale_last=scales[-1][1],
            loss_scales=scales,  # at each logged update
            overflows=len(curves["overflows"]),  # updates skipped (and the scale halved) for inf/NaN gradients
        )
    if spec["budget"].get("patience"):
        best = min(curves["valid"], key=lambda v: v["loss"], default=None)  # fairseq's checkpoint_best.pt
        stopped = "early stop since valid performance" in (run_dir / "train.log").read_text(errors="replace")
        record.update(best_update=best and best["update"], stopped_early=stopped)
    return record


def averaged_score(run_dir, cpu=True):
    """{"test_bleu_averaged", "averaged"}: the test set's SacreBLEU (the claim's beam) of the mean
    of the run's last :data:`AVERAGE_LAST` update checkpoints (their names, oldest first; fewer
    where fewer were kept, checkpoint_last.pt where none was), scored in RUN/averageN/ beside
    checkpoint_best.pt's results; {"averaged_error"} when fairseq-generate failed. The mean
    itself is not kept."""
    from fairseq_layernorm_plugins.runs.evaluate import evaluate

    out = Path(run_dir) / f"average{AVERAGE_LAST}"
    try:
        result = evaluate(run_dir, average_last=AVERAGE_LAST, kind="update", echo=lambda *a: None, out_dir=out, cpu=cpu)
    except RuntimeError as err:
        return {"averaged_error": str(err).splitlines()[0]}
    finally:
        for averaged in out.glob("checkpoint_avg*.pt"):  # only the mean is written there
            averaged.unlink()
    return {
        "test_bleu_averaged": result["bleu"]["sacrebleu"]["score"],
        "averaged": [Path(path).name for path in reversed(result["checkpoints"])],  # evaluate lists newest first
    }


def unigram_of(claim, data_dir):
    """The claim's stall threshold: the unigram entropy (bits) of its training targets, a
    language model's training text (``train.tokens``: ``fairseq-ln-prepare wikitext2``)."""
    return unigram_bits(data_dir, "tokens" if claim.language_model else "en")


def claim_dir(args, seed=None):
    """RUNS/CLAIM, or RUNS/CLAIM-init-STYLE with ``--init-style``, then ``-PRECISION`` with a
    ``--precision`` other than fp32, then ``-seedN`` for a seed (``args.seed`` unless given)
    other than 1, so that seeds never overwrite each other's runs."""
    name = args.claim + (f"-init-{args.init_style}" if args.init_style else "")
    path = Path(args.runs) / (name + (f"-{precision(args)}" if precision(args) != "fp32" else ""))
    return experiment.seed_path(path, args.seed if seed is None else seed)


def budget(args):
    """What makes a claim's runs comparable (OUT.json holds one): the budget's options,
    ``--patience`` when set and a ``--precision`` other than fp32."""
    half = {"precision": precision(args)} if precision(args) != "fp32" else {}
    return experiment.budget(args, BUDGET, UNTIL_CONVERGED) | half
