"""The experiment harness of the scripts that train many small runs on a CPU or one GPU
(``scripts/claims.py``, ``stability_grid.py``, ``main_job.py``, ``gpu/check.py``):

* a scaled recipe: a method's recipe (``configs/multi30k/``, ``configs/iwslt14_mini/``) at a
  depth and model width, with the experiment's optimizer, schedule and budget on top;
* runs in parallel: ``--jobs N`` fairseq subprocesses at once, each with cores // N threads;
* a run trained and tested, with its status: diverged, stalled or trained, by one rule;
* resumable run directories (a run's spec.json, or its record once it is done) and results
  files (OUT.json: the commands that made it, its budget, one record per finished run), so
  that an interrupted experiment goes on where it stopped and runs made under another budget
  are never mixed;
* the benchmarks (``benchmarks/*.py --json``) run in a process of their own, their numbers read back.

What a script adds is its definitions (which runs, what a record holds) and its report
(``render.py``, ``render_grid.py``, ``render_check.py``). Log curves are read by ``curves.py``; a paper's claim is ``claim.py``.
"""

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import NamedTuple

from fairseq_layernorm_plugins.atomic import write_json
from fairseq_layernorm_plugins.experiments.curves import first_error, read_log_curves, status, training_summary
from fairseq_layernorm_plugins.recipes import specs
from fairseq_layernorm_plugins.recipes.config import Recipe, load_recipe, merge
from fairseq_layernorm_plugins.runs.launch import Launch, data_bin, train

REPO = Path(__file__).resolve().parents[2]  # the checkout (the package is installed editable)
SHARED = REPO.parent / "shared" / "data"


def model_size(width, ffn=None, heads=4, stacks=("encoder", "decoder")):
    """fairseq model options of one size in each of ``stacks`` (a language model: the decoder
    alone): embeddings of ``width``, FFN of ``ffn`` (default 4 x width, the papers' base
    ratio), ``heads`` attention heads."""
    sizes = (("embed_dim", width), ("ffn_embed_dim", ffn or 4 * width), ("attention_heads", heads))
    return {f"{stack}_{option}": value for option, value in sizes for stack in stacks}


def adam(name="adam"):
    """Optimizer group ``name`` (adam, radam) with the betas (0.9, 0.98) and weight decay 1e-4 of
    the IWSLT14 recipes, the same for every method of an experiment."""
    return {"_name": name, "adam_betas": "(0.9, 0.98)", "weight_decay": 0.0001}


def scaled_recipe(
    name, depth, size, *, updates, tokens, lr, log_interval, generate=None, overrides=None, schedule=None
):
    """Recipe ``name`` (``multi30k/preln``) at ``depth`` ("6L-6L"), model ``size``
    (:func:`model_size`) and budget: ``updates`` updates of ``tokens`` tokens (one batch) at the
    peak learning rate ``lr`` (fairseq's list), logged every ``log_interval`` updates, decoded
    with the recipe's ``generate`` settings updated by ``generate``. ``overrides`` (recipe
    keys: ``fairseq`` groups, ``precision``, ...) are deep-merged on top as over a recipe's base;
    ``schedule``, when given, replaces the whole lr_scheduler group (e.g. T-Fixup's
    decay_period goes)."""
    recipe = load_recipe(name)
    scale = {
        "depths": {depth: {}},
        "tokens_per_update": tokens,
        "generate": generate or {},
        "fairseq": {
            "model": size,
            "optimization": {"lr": lr, "max_update": updates},
            "dataset": {"max_tokens": tokens},
            "common": {"log_interval": log_interval},
        },
    }
    data = merge(recipe.data, merge(scale, overrides or {}))
    if schedule is not None:
        data["fairseq"]["lr_scheduler"] = schedule
    return Recipe(recipe.name, recipe.path, data).with_depth(depth)


def validation_flags(every, patience=0, bleu=True, keep=1):
    """fairseq-train flags for validation every ``every`` updates, keeping the last ``keep``
    such checkpoints, with (``bleu``) greedy, detokenised, cased SacreBLEU on the validation set (the
    data is SentencePiece over untokenised text); ``patience`` > 0: fairseq's ``--patience``,
    stopping once the validation loss has not improved for that many validations in a row."""
    flags = ["--validate-interval-updates", str(every), "--save-interval-updates", str(every)]
    flags += ["--keep-interval-updates", str(keep), "--no-progress-bar"]
    flags += ["--patience", str(patience)] if patience else []
    return flags + (BLEU_FLAGS if bleu else [])


BLEU_FLAGS = [  # validation BLEU of a translation run (validation_flags)
    "--eval-bleu",
    "--eval-bleu-args",
    json.dumps({"beam": 1, "max_len_a": 1.2, "max_len_b": 10}),
    "--eval-bleu-detok",
    "space",
    "--eval-bleu-remove-bpe",
    "sentencepiece",
]


def threads_per_job(jobs):
    """The thread policy: each of ``jobs`` runs at once gets cores // jobs threads (at least 1),
    through OMP_NUM_THREADS, which every fairseq subprocess inherits (a value already set is
    kept). Two one-thread runs on 2 cores take as long per run as one two-thread run."""
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))
    return int(os.environ["OMP_NUM_THREADS"])


def parallel(work, items, jobs):
    """Yield (item, work(item)) for each of ``items`` as it finishes, ``jobs`` at once under
    :func:`threads_per_job`; ``work`` runs fairseq subprocesses, so its threads only wait."""
    threads_per_job(jobs)
    with ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(work, item): item for item in items}
        for future in as_completed(futures):
            yield futures[future], future.result()


class Outcome(NamedTuple):
    """What training and testing one run gave (:func:`train_and_test`)."""

    curves: dict  # curves.read_log_curves of its train.log
    score: float  # the test set's BLEU (0.0 when fairseq stopped), a language model's perplexity (inf)
    error: str | None  # the first line of the error fairseq stopped with (NaN/inf loss), else None
    minutes: float  # this call's, evaluation included

    @property
    def final_nll(self):
        """The last validation's NLL (bits per token); NaN when fairseq stopped or never validated."""
        valid = self.curves["valid"]
        return valid[-1]["nll_loss"] if valid and self.error is None else math.nan

    def status(self, unigram):
        return status(self.final_nll, unigram)


def run_training(recipe, run_dir, data, seed, extra=(), precision=None, cpu_workers=1):
    """Train (or resume from its checkpoint_last.pt) ``recipe`` in ``run_dir`` on the prepared
    corpus or data-bin ``data``, with fairseq's ``--seed``, the fairseq-train flags ``extra``,
    ``precision`` (default the recipe's; fp32 on a CPU) and ``cpu_workers`` CPU processes (0: one
    GPU). Returns None, or the error fairseq stopped with (a NaN/inf loss is a run's outcome,
    not the experiment's failure): its first line, then the log's tail."""
    run_dir = Path(run_dir)
    launch = Launch(
        recipe,
        str(data_bin(data, recipe, REPO)),
        str(run_dir / "checkpoints"),
        cpu_workers=cpu_workers,
        precision=precision,
        seed=seed,
        extra=list(extra),
    )
    try:
        train(launch, run_dir)
    except RuntimeError as err:  # fairseq stops on NaN/inf losses ("Minimum loss scale", FloatingPointError)
        return str(err)
    return None


def train_and_test(recipe, run_dir, data, seed, extra, bleu="sacrebleu", precision=None, cpu_workers=1):
    """:func:`run_training` on one CPU process (``cpu_workers=0``: one GPU; in ``precision``: fp32
    unless given), then the test set translated by the recipe's protocol (``evaluate.py``, on the
    same device) and scored by ``bleu`` ("sacrebleu" or "tokenized"); a language model's
    scored by its test perplexity."""
    from fairseq_layernorm_plugins.runs.evaluate import evaluate

    start = time.time()
    error = run_training(recipe, run_dir, data, seed, extra, precision, cpu_workers)
    failed = math.inf if recipe.fairseq["task"]["_name"] == "language_modeling" else 0.0
    try:
        result = {} if error else evaluate(run_dir, cpu=bool(cpu_workers), echo=lambda *a: None)
        score = (
            failed
            if error
            else result["perplexity"]["test"]["score"]
            if "perplexity" in result
            else result["bleu"][bleu]["score"]
        )
    except RuntimeError as err:  # fairseq-generate / eval-lm failed
        score, error = failed, str(err)
    error = error and error.splitlines()[0]
    return Outcome(read_log_curves(Path(run_dir) / "train.log"), score, error, round((time.time() - start) / 60, 2))


def train_once(recipe, done, record, data, seed, extra=(), precision=None, cpu_workers=1, force=False, attach=None):
    """A run trained once: ``record`` (what the caller knows of it) with what training ``recipe``
    in the folder of the JSON file ``done`` gave (:func:`run_training`): "error" (only when
    fairseq stopped: the log's line saying why, else the error's first line), "minutes", the
    :func:`curves.training_summary` of its log and, under each key of ``attach``, the JSON file
    the run wrote there. Written to ``done``; a later call returns that file's record unless
    ``force``, which trains again from scratch."""
    done = Path(done)
    run_dir = done.parent
    if done.is_file() and not force:
        return json.loads(done.read_text())
    if force:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    start = time.time()
    error = run_training(recipe, run_dir, data, seed, extra, precision, cpu_workers)
    log = run_dir / "train.log"
    record = {**record, **({"error": first_error(log) or error.splitlines()[0]} if error else {})}
    record["minutes"] = round((time.time() - start) / 60, 2)
    record |= training_summary(read_log_curves(log) if log.is_file() else {"train": [], "valid": []})
    record |= {key: json.loads(path.read_text()) for key, path in (attach or {}).items() if path.is_file()}
    write_json(done, record)
    return record


def test_scores(run_dir, cpu=None):
    """The test set translated by the run's recipe protocol (``evaluate.py``): {"bleu": {metric:
    score}, "sentences"}, or {"bleu_error": the first line of why not}."""
    from fairseq_layernorm_plugins.runs.evaluate import evaluate

    try:
        result = evaluate(run_dir, cpu=cpu, echo=lambda *a: None)
    except (RuntimeError, ValueError) as err:
        return {"bleu_error": str(err).splitlines()[0]}
    return {"bleu": {k: v["score"] for k, v in result["bleu"].items()}, "sentences": result["sentences"]}


def run_benchmark(script, argv, numbers):
    """Run ``benchmarks/SCRIPT`` with ``argv`` in a process of its own (alone on the device:
    timings), its output echoed line by line as "[SCRIPT] line" (progress), its measurements
    written to the JSON file ``numbers`` (its ``--json``); returns {"command", then those
    numbers}, or {"command", "error": its output's last line}."""
    numbers = Path(numbers)
    numbers.unlink(missing_ok=True)  # an earlier call's numbers are not this one's
    cmd = [sys.executable, str(REPO / "benchmarks" / script), *argv, "--json", str(numbers)]
    tag = f"[{Path(script).stem}]"
    print(f"{tag} $ {shlex.join(cmd)}", flush=True)
    last = "(no output)"
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            if line.strip():
                last = line.strip()
                print(f"{tag} {last}", flush=True)
    if proc.returncode or not numbers.is_file():
        return {"command": shlex.join(cmd), "error": last}
    return {"command": shlex.join(cmd), **json.loads(numbers.read_text())}


EXTENDED = "extended_from.json"  # in a run directory: the budgets it was trained under before (extended_from)
STOPPING = ("updates", "patience", "validate_every")  # budget entries that decide when a run stops, not how it trains


def extends(previous, spec):
    """Whether ``spec`` is ``previous`` trained for more updates: the same run in all else (its
    "budget" and "fairseq" options but for when it stops: the updates, and how often it is
    validated and with what ``--patience``; fairseq seeds every update from ``--seed`` and the
    update number, so validations do not change training), under a schedule that does not
    depend on the budget (inverse_sqrt), so that resuming the shorter run trains the longer
    one. A run extended with ``--patience`` has trained at least the earlier budget."""

    def without_updates(s):
        return {
            **s,
            "budget": {key: value for key, value in s["budget"].items() if key not in STOPPING},
            "fairseq": {**s["fairseq"], "optimization": {**s["fairseq"]["optimization"], "max_update": None}},
        }

    return (
        spec["budget"]["updates"] > previous["budget"]["updates"]
        and spec["fairseq"]["lr_scheduler"]["_name"] == "inverse_sqrt"
        and specs.same_run(without_updates(previous), without_updates(spec))
    )


def open_run_dir(run_dir, spec, label):
    """Make ``run_dir`` the directory of the run ``spec`` describes (everything that decides
    its outcome, with its "budget" and "fairseq" options; written as spec.json): a run made
    with the same spec (``specs.same_run``: fairseq's defaults written out or not), or a shorter one that ``spec`` :func:`extends` with a checkpoint to go
    on from, is kept for fairseq to resume (the shorter one's budget added to
    extended_from.json: :func:`extended_from`); one made with another spec is removed, so that
    the run trains again from scratch."""
    run_dir = Path(run_dir)
    spec_file = run_dir / "spec.json"
    previous = json.loads(spec_file.read_text()) if spec_file.exists() else spec
    same = specs.same_run(previous, spec)
    if not same and extends(previous, spec) and (run_dir / "checkpoints" / "checkpoint_last.pt").exists():
        print(
            f"[{label}] budget extended from {previous['budget']['updates']} to {spec['budget']['updates']} updates: "
            "resuming from its last checkpoint",
            flush=True,
        )
        write_json(run_dir / EXTENDED, extended_from(run_dir) + [previous["budget"]])
    elif not same:
        print(f"[{label}] spec changed: training again from scratch", flush=True)
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(spec_file, spec)
    return run_dir


def extended_from(run_dir):
    """The budgets, oldest first, that the run in ``run_dir`` was trained under before its spec
    :func:`extends` them (its validations up to each budget's end were made at that budget's
    interval, and ``--patience`` counts from the resume); [] for a run trained under one."""
    path = Path(run_dir) / EXTENDED
    return json.loads(path.read_text()) if path.exists() else []


def budget(args, names, when_set=()):
    """The options ``names`` of ``args`` that make an experiment's runs comparable, and those of
    ``when_set`` that are set (so that results made before such an option existed keep theirs)."""
    return {name: getattr(args, name) for name in names} | {
        name: getattr(args, name) for name in when_set if getattr(args, name, 0)
    }


def command_line(script, argv=None):
    """The command as typed (``argv``: its arguments; default this process's), for the report."""
    return shlex.join(["python", script, *(sys.argv[1:] if argv is None else argv)])


class Results:
    """OUT.json of an experiment: the commands that made it, its budget and one record per
    finished run (under ``kind``: "runs", "cells"), written again after each run, with
    ``command`` (None: one that makes nothing, e.g. a report). A later command adds runs
    to it, under the same budget only (``earlier``: the values of budget
    entries added since the file was written); it exits naming both budgets otherwise.
    Commands may fill one OUT.json at once (other runs, other ``--runs-only``): each write
    keeps the records and commands the others added since this one read the file."""

    def __init__(self, path, budget, command, kind="runs", earlier=None):
        self.path, self.budget, self.kind = Path(path), budget, kind
        previous = (
            json.loads(self.path.read_text()) if self.path.exists() else {"commands": [], "budget": budget, kind: []}
        )
        made_with = {**(earlier or {}), **previous["budget"]}
        if made_with != budget:
            sys.exit(
                f"error: {self.path} holds {kind} made with {made_with}, not {budget}; use another --out or remove it"
            )
        self.commands = previous["commands"] + ([command] if command and command not in previous["commands"] else [])
        self.records = previous[kind]
        self._known = list(self.records)  # read at the start or written since: not another command's

    def write(self, records):
        """Write ``records`` (this command's: any it read and left out stay out) and the records
        other commands added to the file since this one read it; returns all of them."""
        records = list(records)
        now = json.loads(self.path.read_text()) if self.path.exists() else {"commands": [], self.kind: []}
        theirs = [r for r in now[self.kind] if r not in self._known and r not in records]
        self._known += records
        self.commands += [c for c in now["commands"] if c not in self.commands]
        write_json(self.path, {"commands": self.commands, "budget": self.budget, self.kind: records + theirs})
        return records + theirs

    def train(self, work, todo, jobs, done, key, describe):
        """Run ``work`` on each of ``todo`` (:func:`parallel`), keeping its record in ``done`` under
        ``key(item)`` and OUT.json up to date; prints "[n/N] describe(item, record)" as each ends."""
        for n, (item, record) in enumerate(parallel(work, todo, jobs), 1):
            done[key(item)] = record
            print(f"[{n}/{len(todo)}] {describe(item, record)}", flush=True)
            self.write(done.values())


def seed_path(path, seed):
    """``path`` for seed 1 (an experiment's first run), ``path-seedN`` for the others, so that
    seeds never overwrite each other's runs or results."""
    path = Path(path)
    return path if seed == 1 else path.with_name(f"{path.name}-seed{seed}")


def seed_results(out):
    """{seed: results} of every seed whose OUT.json (seed 1) or OUT-seedN.json lies beside OUT."""
    out = Path(out)
    name = re.compile(re.escape(out.name) + r"(-seed[0-9]+)?\.json")
    files = [f for f in sorted(out.parent.glob(f"{out.name}*.json")) if name.fullmatch(f.name)]
    return {r["budget"]["seed"]: r for r in map(json.loads, map(Path.read_text, files))}


def prepare_corpus(corpus, data, test_lines=0, raw_dir=None, download_dir=None, url=None, iwslt_dir=None):
    """Prepare ``corpus`` in ``data`` as the main job does (nothing to do when up to date), so
    that the scripts share one data directory: "multi30k" (``raw_dir`` default
    ../shared/data/multi30k/task1_raw when present, else downloaded from ``url`` to
    ``download_dir``, default data/downloads) or "iwslt14-mini" (from ``iwslt_dir``, default
    ../shared/data/iwslt14); ``test_lines`` > 0: that many evenly spaced test lines. Returns its
    stamp; exits with the one-line reason when the data cannot be had. "wikitext2": as
    ``fairseq-ln-prepare wikitext2`` (../shared/data/wikitext2 when present, else the download).

    Multi30k and WikiText-2 with no ``raw_dir`` named, where the raw files cannot be had (a
    cluster node with neither network nor ../shared) but ``data`` holds a copy prepared
    elsewhere with the same options (:func:`copied_corpus`): that copy is used, with a warning
    that it cannot be checked against the raw files' checksums there."""
    from fairseq_layernorm_plugins.prepare import iwslt14_mini, multi30k, wikitext
    from fairseq_layernorm_plugins.prepare.textio import DataError

    try:
        if corpus == "wikitext2":
            raw = wikitext.default_raw_dir("wikitext2")
            return wikitext.prepare(
                data, "wikitext2", raw_dir=raw, download_dir=str(download_dir or REPO / "data" / "downloads"), url=url
            )
        if corpus == "multi30k":
            return multi30k.prepare(
                data,
                raw_dir=raw_dir or multi30k.default_raw_dir(),
                download_dir=str(download_dir or REPO / "data" / "downloads"),
                url=url or multi30k.URL,
                test_lines=test_lines or None,
            )
        return iwslt14_mini.prepare(iwslt_dir or SHARED / "iwslt14", data, test_lines=test_lines or None)
    except DataError as err:
        if raw_dir is None and (stamp := copied_corpus(corpus, data, test_lines)):
            print(
                f"warning: cannot check {data} against its raw files ({err}); training from it as prepared "
                f"elsewhere (recipe {stamp['recipe']}), unverified",
                file=sys.stderr,
            )
            return stamp
        sys.exit(f"error: {err}")


def copied_corpus(corpus, data, test_lines=0):
    """The stamp of ``data`` when it is a complete copy of ``corpus`` as :func:`prepare_corpus`
    prepares it (the stamp's recipe and options match, bin/ holds a dictionary and the
    training set), else None."""
    from fairseq_layernorm_plugins.prepare import multi30k

    expected = {  # what multi30k.prepare / wikitext.prepare write with prepare_corpus's options
        "multi30k": dict(
            recipe=multi30k.recipe_name(test_lines=test_lines or None),
            src="de",
            tgt="en",
            sentencepiece=8000,
            merges=None,
            train_pairs=None,
        ),
        "wikitext2": dict(recipe="wikitext2", train_lines=None),
    }.get(corpus)
    stamp_path, bin_dir = Path(data) / "stamp.json", Path(data) / "bin"
    complete = stamp_path.is_file() and any(bin_dir.glob("dict*.txt")) and any(bin_dir.glob("train*.bin"))
    if expected is None or not complete:
        return None
    try:
        stamp = json.loads(stamp_path.read_text())
    except json.JSONDecodeError:
        return None
    return stamp if all(stamp.get(key) == value for key, value in expected.items()) else None


def device_facts(device, note=""):
    """The machine an experiment ran on ("cuda" or "cpu"; ``note`` added to its name), with
    torch's and Python's versions and the date."""
    import datetime

    import torch

    facts = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "date": datetime.date.today().isoformat(),
    }
    if device == "cuda":
        facts["device"] = torch.cuda.get_device_name(0)
        facts["memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    else:
        facts["device"] = f"CPU ({os.cpu_count()} cores, {torch.backends.cpu.get_cpu_capability()})"
    facts["device"] += note
    return facts
