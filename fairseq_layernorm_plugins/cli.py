"""The console commands (``pyproject.toml``'s ``[project.scripts]``); ``scripts/*.py`` call
the same functions, so ``fairseq-ln-train X`` and ``python scripts/train.py X`` are one thing.
Each returns None: a console script passes its return value to ``sys.exit``.

    fairseq-ln-prepare multi30k                      # = python scripts/prepare_multi30k.py
    fairseq-ln-prepare wikitext2                     # = python scripts/prepare_wikitext.py wikitext2
    fairseq-ln-train iwslt14/admin --gpus 1          # = python scripts/train.py ...
    fairseq-ln-evaluate runs/iwslt14/admin/6L-6L.seed1
    fairseq-ln-table runs --table wmt14/admin --out results/wmt14_admin
    fairseq-ln-submit wmt14/admin/admin --depths 18L-18L --gpus 8 --partition gpu

Recipes are read from the repository's ``configs/`` and runs go to its ``runs/`` (the package
is installed in editable mode: fairseq imports ``--user-dir`` by folder).
"""

import argparse
import importlib
import shlex
import sys
from pathlib import Path

from fairseq_layernorm_plugins.recipes.config import CONFIG_DIR, REPO, RecipeError, list_recipes, load_recipe
from fairseq_layernorm_plugins.runs.launch import PRECISIONS, Launch, check_data_bin, data_bin, run_dir
from fairseq_layernorm_plugins.runs.launch import train as run_training

CORPORA = (
    "multi30k",
    "iwslt14",
    "iwslt14_mini",
    "wmt14",
    "wmt14_mini",
    "wikitext103",
    "wikitext2",
    "gigaword",
    "gigaword_mini",
    "librispeech",
    "librispeech_espeak",
)


def _parser(doc, **kwargs):
    return argparse.ArgumentParser(
        description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs
    )


PREPARE_DOC = """Prepare a corpus (download or read it, tokenise, learn subwords, binarise):

    fairseq-ln-prepare CORPUS [options]        (fairseq-ln-prepare CORPUS --help for its options)

where CORPUS is one of: {corpora}.

Outputs default to the repository's data/ (where fairseq-ln-train reads a recipe's data, from any
folder); a relative --out is relative to the current folder. The last line names the absolute
output folder and the --data that trains on it. An existing --out that holds files this command
did not write is refused (exit code 2), never replaced.
"""


def prepare(argv=None):
    """``fairseq-ln-prepare CORPUS ...``: the corpus module's own command line."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in CORPORA:
        doc = PREPARE_DOC.format(corpora=", ".join(CORPORA))
        if argv and argv[0] in ("-h", "--help"):
            print(doc)
            sys.exit(0)
        named = f", not {argv[0]!r}" if argv else ""
        print(f"error: name a corpus first ({', '.join(CORPORA)}){named}", file=sys.stderr)
        sys.exit(2)
    module = importlib.import_module(f"fairseq_layernorm_plugins.prepare.{argv[0]}")
    sys.argv[0] = f"fairseq-ln-prepare {argv[0]}"
    module.main(argv[1:])


TRAIN_DOC = """Train a recipe: configs/<recipe>.yaml + data + machines -> fairseq-train.

    fairseq-ln-train iwslt14/admin --gpus 1
    fairseq-ln-train wmt14/admin/admin --depth 18L-18L --gpus 8 --precision bf16
    fairseq-ln-train iwslt14_mini/preln --cpu-workers 2          # CPU data parallel (gloo)
    fairseq-ln-train iwslt14/preln --dry-run -- --max-epoch 5    # print the command only
    fairseq-ln-train iwslt14/admin --hydra-config hydra/admin.yaml  # for fairseq-hydra-train

Keeps the recipe's tokens per update for any number of GPUs (max-tokens x update-freq),
prints the exact fairseq command, writes runs/<recipe>/<depth>.seed<S>/{run.json,train.log}
and resumes from that run's checkpoint_last.pt. Without --gpus or --cpu-workers it trains on
one GPU, or on one CPU process where torch sees no GPU. Multi-node runs go through
fairseq-ln-submit (SLURM). Arguments after ``--`` go to fairseq-train unchanged (this
command's own options go before it).
"""


def add_launch_args(parser):
    parser.add_argument("--depth", help="e.g. 18L-18L (default: the recipe's first)")
    parser.add_argument(
        "--data", help="prepared data directory or data-bin (default: the recipe's data, under the repo)"
    )
    parser.add_argument(
        "--gpus", type=int, help="GPUs per node (default: 1, or one CPU process where torch sees no GPU)"
    )
    parser.add_argument(
        "--cpu-workers", type=int, default=0, help="train on CPU with N data-parallel processes (gloo) instead"
    )
    parser.add_argument("--precision", choices=PRECISIONS, help="default: the recipe's (fp32 on CPU)")
    parser.add_argument("--seed", type=int, default=1, help="default: 1")
    parser.add_argument("--runs", default=str(REPO / "runs"), help="where runs go (default: runs/)")
    parser.add_argument("--master-port", type=int, default=29500)


def gpu_count():
    """The GPUs torch sees on this machine."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def machines(args):
    """(GPUs per node, CPU workers) of :func:`add_launch_args`' options: as given, or neither
    given: one GPU, one CPU process on a machine without one."""
    if args.gpus is not None and args.gpus < 1:
        raise ValueError(f"--gpus {args.gpus}: at least 1 (--cpu-workers N trains on CPU processes)")
    if args.cpu_workers < 0:
        raise ValueError(f"--cpu-workers {args.cpu_workers}: at least 1 (0, the default: GPUs)")
    if args.gpus is not None and args.cpu_workers:
        raise ValueError("--gpus and --cpu-workers: give one or the other")
    if args.gpus is None and not args.cpu_workers:
        return (1, 0) if gpu_count() else (0, 1)
    return args.gpus or 0, args.cpu_workers


def make_launch(args, recipe_name, extra=()):
    """(Launch, run directory) for ``recipe_name`` with the options of :func:`add_launch_args`."""
    recipe = load_recipe(recipe_name).with_depth(args.depth)
    run = run_dir(args.runs, recipe, args.seed)
    gpus, cpu_workers = machines(args)
    launch = Launch(
        recipe,
        str(data_bin(args.data, recipe, REPO).absolute()),
        str(run / "checkpoints"),
        gpus=gpus or 1,
        cpu_workers=cpu_workers,
        precision=args.precision,
        seed=args.seed,
        master_port=args.master_port,
        extra=list(extra),
    )
    return launch, run


def check_machine(launch):
    """Raise ValueError unless this machine has the GPUs ``launch`` trains on."""
    if not launch.cpu_workers and gpu_count() < launch.gpus:
        raise ValueError(
            f"--gpus {launch.gpus}: torch sees {gpu_count()} GPU(s) here; --cpu-workers N trains on CPU processes"
        )


def check_pass_through(parser, extra):
    """Raise ValueError when an option of this command comes after ``--``, where it would go to
    fairseq-train (``--dry-run`` there would start a real run; ``--seed`` would train another
    seed than the run directory names)."""
    ours = {opt for action in parser._actions for opt in action.option_strings if opt.startswith("--")}
    ours -= {"--help"}
    for arg in extra:
        if arg.split("=")[0] in ours:
            raise ValueError(
                f"{arg.split('=')[0]} comes after '--', which passes it to fairseq-train: "
                "put this command's options before '--'"
            )


def train(argv=None):
    """``fairseq-ln-train RECIPE [options] [-- fairseq-train flags]``."""
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = _parser(TRAIN_DOC, epilog="recipes: " + ", ".join(list_recipes()))
    parser.add_argument("recipe", help="a recipe name (e.g. iwslt14/admin) or a YAML path")
    add_launch_args(parser)
    parser.add_argument("--dry-run", action="store_true", help="print the command and exit")
    parser.add_argument(
        "--hydra-config",
        metavar="FILE.yaml",
        help="write the run as a fairseq-hydra-train config instead of training "
        "(then: fairseq-hydra-train --config-dir DIR --config-name FILE)",
    )
    args = parser.parse_args(argv)
    try:
        check_pass_through(parser, extra)
        launch, run = make_launch(args, args.recipe, extra)
        if not (args.hydra_config or args.dry_run):  # a real run: check before writing anything
            try:
                check_data_bin(launch.data, launch.recipe, launch.extra)
            except ValueError as err:
                given = "--data " if args.data else ""
                hint = "" if args.data else " (the recipe's data: prepare it, docs/data.md, or give --data)"
                raise ValueError(f"{given}{err}{hint}") from None
            check_machine(launch)
    except (RecipeError, ValueError) as err:
        parser.exit(2, f"error: {err}\n")
    if args.hydra_config:
        try:
            path = launch.write_hydra_config(args.hydra_config)
        except ValueError as err:
            parser.exit(2, f"error: {err}\n")
        print(f"fairseq-hydra-train --config-dir {path.parent.resolve()} --config-name {path.stem}")
        return
    if args.dry_run:
        print(launch.describe())
        if paper := launch.recipe.paper_line():
            print(paper)
        print(shlex.join(launch.command()))
        return
    try:
        run_training(launch, run)
    except RuntimeError as err:
        sys.exit(str(err))


EVALUATE_DOC = """Evaluate training runs (see fairseq_layernorm_plugins/runs/evaluate.py):

    fairseq-ln-evaluate runs/iwslt14/admin/6L-6L.seed1 [more run dirs]

scores the checkpoints the recipe's protocol names (the last N averaged, --average-last; up
to --checkpoint-upper-bound; a best window; a per-epoch curve: runs/evaluate.py),
runs fairseq-generate with the recipe's beam and length penalty, detokenises, and writes
results.json with SacreBLEU (and its signature), tokenized and compound-split BLEU; a headline
recipe (gigaword/*) gets F1 ROUGE-1/2/L instead, a language model its perplexity, a speech
recipe (librispeech/*) fairseq's WER on each of LibriSpeech's dev/test clean/other sets (or on
the sets --subset names).
"""


def evaluate(argv=None):
    """``fairseq-ln-evaluate RUN_DIR...``: results.json in each run directory."""
    from fairseq_layernorm_plugins.runs.evaluate import evaluate as evaluate_run

    parser = _parser(EVALUATE_DOC)
    parser.add_argument("run_dirs", nargs="+", help="run directories (with run.json), as fairseq-ln-train writes them")
    parser.add_argument("--average-last", type=int, help="checkpoints to average (default: the recipe's)")
    parser.add_argument(
        "--checkpoints", choices=("epoch", "update"), default="epoch", help="average epoch or update checkpoints"
    )
    parser.add_argument(
        "--checkpoint-upper-bound",
        type=int,
        metavar="E",
        help="average the last N checkpoints up to epoch (update) E, as fairseq's average_checkpoints.py "
        "(default: the recipe's checkpoint_upper_bound, else the newest)",
    )
    parser.add_argument(
        "--subset",
        help="the split to score (default: test); a speech run: comma-separated sets (default: the recipe's)",
    )
    parser.add_argument(
        "--max-tokens", type=int, help="per decoding batch (default: 8000 tokens; speech: 50000 frames)"
    )
    args = parser.parse_args(argv)
    for path in args.run_dirs:
        try:
            evaluate_run(
                path,
                args.average_last,
                args.checkpoints,
                args.subset,
                args.max_tokens,
                upper_bound=args.checkpoint_upper_bound,
            )
        except (OSError, ValueError) as err:
            print(f"error: {path}: {err}", file=sys.stderr)
            sys.exit(2)
        except RuntimeError as err:  # fairseq-generate / eval-lm failed: the log's tail
            sys.exit(f"error: {path}: {err}")


def table(argv=None):
    """``fairseq-ln-table PATHS --table T --out PREFIX``: see :mod:`~.recipes.report`."""
    from fairseq_layernorm_plugins.experiments.report import main

    main(argv)


SUBMIT_DOC = """Submit a grid of runs (recipes x depths x seeds) to SLURM with submitit, one job per
run, each training and then evaluating (see fairseq_layernorm_plugins/runs/slurm.py):

    fairseq-ln-submit wmt14/admin/postln wmt14/admin/preln wmt14/admin/admin \\
        --depths 6L-6L 12L-12L 18L-18L --seeds 1 2 3 --gpus 4 --partition gpu
    fairseq-ln-submit ... --dry-run            # write the sbatch scripts only
    fairseq-ln-submit iwslt14_mini/preln --cluster local --cpu-workers 1   # run locally
"""


def submit(argv=None):
    """``fairseq-ln-submit RECIPE... [options]``: one SLURM job per (recipe, depth, seed)."""
    from fairseq_layernorm_plugins.runs.slurm import grid, write_sbatch
    from fairseq_layernorm_plugins.runs.slurm import submit as submit_jobs

    parser = _parser(SUBMIT_DOC)
    parser.add_argument("recipes", nargs="+", help="recipe names, e.g. wmt14/admin/admin")
    parser.add_argument("--depths", nargs="+", help="default: each recipe's depths")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1])
    parser.add_argument("--data", help="data directory (default: each recipe's)")
    parser.add_argument("--runs", default=str(REPO / "runs"))
    parser.add_argument("--config-dir", default=str(CONFIG_DIR), help="where recipe names are looked up")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs (= tasks) per node (default: 8)")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument(
        "--cpu-workers", type=int, default=0, help="CPU processes (= tasks) per node instead of GPUs (gloo)"
    )
    parser.add_argument("--precision", choices=PRECISIONS)
    parser.add_argument("--partition")
    parser.add_argument("--account")
    parser.add_argument("--timeout-min", type=int, default=4320, help="per job, before requeue (default: 3 days)")
    parser.add_argument("--cpus-per-task", type=int, default=8)
    parser.add_argument("--mem-gb", type=int)
    parser.add_argument("--cluster", choices=("slurm", "local"), help="default: SLURM if available")
    parser.add_argument(
        "--dry-run", action="store_true", help="write equivalent sbatch scripts to RUNS/sbatch/ and stop"
    )
    args = parser.parse_args(argv)
    try:  # every run's recipe, depth and flags before anything is written or submitted
        if args.cpu_workers < 0 or args.gpus < 1 or args.nodes < 1:
            raise ValueError("--gpus, --nodes and --cpu-workers: counts of at least 1 (--cpu-workers: 0 for GPUs)")
        runs = grid(
            args.recipes,
            args.depths,
            args.seeds,
            data=args.data,
            runs=args.runs,
            gpus=0 if args.cpu_workers else args.gpus,
            nodes=args.nodes,
            cpu_workers=args.cpu_workers,
            precision=args.precision,
            config_dir=args.config_dir,
        )
        for run in runs:
            run.launch(slurm=args.cluster != "local").fairseq_args()
        if not args.dry_run:
            import submitit  # noqa: F401
    except (RecipeError, ValueError) as err:
        parser.exit(2, f"error: {err}\n")
    except ImportError:
        parser.exit(2, "error: submitit is not installed (pip install submitit); --dry-run writes sbatch scripts\n")
    resources = dict(
        timeout_min=args.timeout_min,
        partition=args.partition,
        cpus_per_task=args.cpus_per_task,
        mem_gb=args.mem_gb,
        account=args.account,
    )
    if args.dry_run:
        for run in runs:
            print(write_sbatch(run, Path(args.runs) / "sbatch", **resources))
        return
    jobs = submit_jobs(runs, Path(args.runs) / "submitit", cluster=args.cluster, **resources)
    for run, job in zip(runs, jobs):
        print(f"{job.job_id}\t{run.recipe} {run.depth} seed {run.seed}\t{run.run_dir()}")
