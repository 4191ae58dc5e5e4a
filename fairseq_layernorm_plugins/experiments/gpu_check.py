"""The GPU check's plan (``scripts/gpu/check.py``): its parts, its budgets
(``configs/gpu_check.yaml``), the training runs each part needs, and what an earlier check's
report carries (``--carry``), so that a lease-sized machine runs only what is missing."""

import dataclasses
import json
from dataclasses import dataclass

import yaml

from fairseq_layernorm_plugins.experiments import experiment
from fairseq_layernorm_plugins.methods import METHODS as REGISTRY
from fairseq_layernorm_plugins.methods import method_names
from fairseq_layernorm_plugins.recipes.config import CONFIG_DIR, load_recipe

# method: (recipe under configs/iwslt14_mini and configs/iwslt14, extra fairseq flags, label): every
# registered method with an IWSLT14-mini recipe, and B2T without LayerNorm beside B2T
METHODS = {}
for _name in method_names("iwslt14_mini"):
    METHODS[_name] = (_name, [], REGISTRY[_name].label)
    if _name == "b2t":
        METHODS["b2t_noln"] = ("b2t", ["--b2t-no-layer-norm"], "B2T w/o LN")
DEEP = ("postln", "admin", "b2t", "preln")
PARTS = "abcdef"
OMEGA_TOLERANCE = 1e-4  # relative; fp16 / bf16 profiling must be the fp32 one


@dataclass(frozen=True)
class Budget:
    """One of configs/gpu_check.yaml's budgets."""

    updates: int
    deep_updates: int
    dim: int
    ffn: int
    tokens: int
    log_interval: int
    precisions: tuple
    bench: tuple  # benchmarks/throughput.py arguments
    decode: tuple  # benchmarks/decoding.py arguments
    generate: tuple = ()  # (setting, value) over the recipe's decoding (beam 5, last checkpoint)
    layers: int = 6  # transformer_iwslt_de_en's
    deep_layers: int = 18  # the deep claims' (Admin Table 2, B2T Table 1)
    heads: int = 4  # transformer_iwslt_de_en's


def load_budgets(path=CONFIG_DIR / "gpu_check.yaml"):
    """{"gpu" | "cpu" | "dry": Budget} from ``path``."""
    budgets = {}
    for name, b in yaml.safe_load(path.read_text()).items():
        lists = {key: tuple(b[key]) for key in ("precisions", "bench", "decode")}
        budgets[name] = Budget(**{**b, **lists, "generate": tuple(b.get("generate", {}).items())})
    return budgets


BUDGETS = load_budgets()
GPU, CPU, DRY = BUDGETS["gpu"], BUDGETS["cpu"], BUDGETS["dry"]


@dataclass(frozen=True)
class Run:
    part: str  # "a", "b" or "d"
    method: str
    precision: str
    layers: int
    updates_planned: int

    @property
    def name(self):
        return f"{self.part}.{self.method}.{self.layers}L.{self.precision}"


def chosen_methods(methods, dry_run):
    """The part-a methods ``--methods`` names (comma-separated keys of METHODS; "all", the default:
    every one; on a dry run the default is the papers' six and B2T w/o LN), in METHODS order."""
    from fairseq_layernorm_plugins.methods import PAPER_METHODS, pick_methods

    default = [m for m in METHODS if METHODS[m][0] in PAPER_METHODS] if dry_run else list(METHODS)
    chosen = pick_methods(methods, list(METHODS), default)
    return [m for m in METHODS if m in chosen]


def chosen_deep(methods):
    """Part d's methods that ``--deep-methods`` names (comma-separated, from DEEP; default all),
    in DEEP order; an unknown name raises ValueError."""
    chosen = DEEP if methods is None else [m.strip() for m in methods.split(",") if m.strip()]
    unknown = sorted(set(chosen) - set(DEEP))
    if unknown or not chosen:
        raise ValueError(f"unknown method(s) {', '.join(unknown) or '(none named)'}; choose from {', '.join(DEEP)}")
    return [m for m in DEEP if m in chosen]


def plan(parts, budget, methods, deep=DEEP):
    """The training runs the parts need for part a's ``methods`` (and part d's ``deep``), in the
    order they are started (deep ones first: longest)."""
    runs = []
    if "d" in parts:
        runs += [Run("d", m, budget.precisions[0], budget.deep_layers, budget.deep_updates) for m in deep]
    if "a" in parts or "b" in parts or "f" in parts:
        # the runs part b (Admin) and part f (Pre-LN) need, whatever part a's methods
        needed = [m for m, part in (("admin", "b"), ("preln", "f")) if part in parts]
        methods = [m for m in METHODS if m in (methods if "a" in parts else []) or m in needed]
        runs += [Run("a", m, p, budget.layers, budget.updates) for m in methods for p in budget.precisions]
    if "b" in parts:
        runs.append(Run("b", "admin", "fp32", budget.layers, 1))
    return runs


def run_recipe(run, budget):
    """The method's IWSLT14-mini recipe at the run's depth and the check's model size, with
    the full IWSLT14 recipe's peak lr."""
    name = METHODS[run.method][0]
    return experiment.scaled_recipe(
        f"iwslt14_mini/{name}",
        f"{run.layers}L-{run.layers}L",
        experiment.model_size(budget.dim, budget.ffn, budget.heads),
        updates=run.updates_planned,
        tokens=budget.tokens,
        lr=load_recipe(f"iwslt14/{name}").fairseq["optimization"]["lr"],
        log_interval=budget.log_interval,
        generate=dict(budget.generate),
        overrides={
            "precision": run.precision,
            "fairseq": {"checkpoint": {"no_save": False, "no_epoch_checkpoints": True}},
        },
    )


BENCHMARKS = {"c": "throughput", "f": "decoding"}  # the check's benchmark parts and their check.json keys


def carried(earlier, budget, archs=(), parts="abcdef"):
    """What an earlier check.json (``--carry``) measured and this one need not measure again,
    when it ran under the same ``budget`` (nothing otherwise): ({run name: record} of its
    finished runs, {(part, precision): benchmark} of its benchmarks without an error, the
    throughput ones only where they timed every arch of ``archs``), each marked with the facts of
    the check that measured it (the earlier one's, or those it carried itself). A Pre-LN run of
    part a is not carried while part f (of ``parts``) still has to decode with its checkpoint;
    part c's throughput, when part c is not in ``parts``, is carried whatever archs it timed."""
    if earlier is None or json.loads(json.dumps(dataclasses.asdict(budget))) != earlier["budget"]:
        return {}, {}
    mark = {"carried": earlier["facts"]}
    complete = lambda part, b: part != "c" or part not in parts or set(archs) <= set(b["archs"])
    benches = {
        (part, b["precision"]): {**mark, **b}
        for part, key in BENCHMARKS.items()
        for b in earlier.get(key, [])
        if "error" not in b and "not_run" not in b and complete(part, b)
    }
    decoded = lambda r: (
        "f" not in parts or r["method"] != "preln" or r["part"] != "a" or ("f", r["precision"]) in benches
    )
    runs = {r["name"]: {**mark, **r} for r in earlier["runs"] if "error" not in r and "not_run" not in r and decoded(r)}
    return runs, benches


def carried_from(earlier):
    """The facts of each machine whose results an earlier check.json holds, its own last, each
    once (a check carried over two calls on one machine names that machine once)."""
    facts = [*earlier.get("carried_from", []), earlier["facts"]]
    return [f for i, f in enumerate(facts) if f not in facts[:i]]


def unfinished(report):
    """(names that failed, names not run) of a check.json's runs, benchmarks and BLEU scores: what
    the next call, carrying this report, has left to do."""
    entries = [(r["name"], r) for r in report["runs"]]
    entries += [(f"{key} {b['precision']}", b) for key in BENCHMARKS.values() for b in report.get(key, [])]
    failed = [name for name, entry in entries if "error" in entry]
    not_run = [name for name, entry in entries if "not_run" in entry]
    return failed, not_run + [f"{r['name']} BLEU" for r in report["runs"] if "bleu_not_run" in r]
