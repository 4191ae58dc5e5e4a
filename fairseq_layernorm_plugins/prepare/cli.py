"""The command-line options and error handling every preparation script shares.

Outputs and downloads default to the repository's ``data/`` (:data:`DATA`), where
``fairseq-ln-train`` reads a recipe's data, whatever the current folder; a ``--out``
given relative is relative to the current folder, as usual, and the command's last line
names the absolute folder and the ``--data`` that trains on it. Bad input or arguments
end with one line, ``error: ...`` naming the file (and line) or the argument, and exit
code 2, with nothing half-written."""

import argparse
import logging
import shlex
from pathlib import Path

from fairseq_layernorm_plugins.prepare.output import normalise
from fairseq_layernorm_plugins.prepare.textio import DataError

REPO = Path(__file__).resolve().parents[2]  # the checkout (the package is installed editable)
DATA = REPO / "data"  # where prepared corpora land by default, and the recipes read them
DOWNLOADS = DATA / "downloads"


class ArgumentParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line (``error: argument --x: ...``, exit 2)."""

    def error(self, message):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def argument_parser(doc):
    """The parser of a preparation command: its description is ``doc``'s first paragraph."""
    return ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)


def positive(text):
    """An argparse type: a whole number of at least 1 (a count)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


positive.__name__ = "positive int"  # argparse's "invalid positive int value: 'x'"


def in_data(name):
    """The default ``--out`` ``name``: under the repository's data/ (:data:`DATA`)."""
    return str(DATA / name)


def add_shared_data_arg(parser):
    """``--shared-data``: the folder of real corpora beside the checkout (``../shared/data``)
    that the mini corpora are built from."""
    parser.add_argument(
        "--shared-data",
        default=str(Path(__file__).resolve().parents[3] / "shared" / "data"),
        help="the shared data folder (default: ../shared/data)",
    )


def add_common_args(parser, subsample=True, workers="processes for tokenisation, BPE and binarisation"):
    """The options every preparation takes: ``--workers`` (``workers`` says what they do),
    ``--force``, ``--keep-work``; with ``subsample``, ``--train-pairs`` and its ``--seed``."""
    if subsample:
        parser.add_argument(
            "--train-pairs",
            type=positive,
            default=None,
            metavar="K",
            help="keep K training pairs, drawn deterministically by --seed (default: all)",
        )
        parser.add_argument("--seed", type=int, default=1, help="seed of --train-pairs (default: 1)")
    parser.add_argument("--workers", type=positive, default=2, help=f"{workers} (default: 2)")
    parser.add_argument("--force", action="store_true", help="redo every step even if its stamp is up to date")
    parser.add_argument("--keep-work", action="store_true", help="keep OUT.work/ (intermediate steps) after success")


COMMON = ("train_pairs", "seed", "workers", "force", "keep_work")


def summary_line(out_dir, stamp):
    """The command's last line: the absolute output folder, its sizes, and the ``--data``
    that trains on it."""
    sizes = ", ".join(f"{split} {n}" for split, n in stamp.get("sizes", {}).items())
    return f"{out_dir}: {sizes}; train on it: fairseq-ln-train RECIPE --data {shlex.quote(str(out_dir))}"


def run_cli(parser, fn, args, summary=summary_line, **kwargs):
    """``fn(**kwargs)`` plus those of the :data:`COMMON` options that ``args`` has (a parse of
    a parser given :func:`add_common_args`, or some of them), ``out_dir`` made absolute; a
    :class:`DataError` or an OSError (a file that cannot be read or written) exits 2 with its
    one-line message. Prints ``summary(out_dir, stamp)`` last (:func:`summary_line`; None:
    nothing)."""
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO)
    kwargs.update({name: getattr(args, name) for name in COMMON if hasattr(args, name)})
    try:
        kwargs["out_dir"] = normalise(kwargs["out_dir"])
        stamp = fn(**kwargs)
    except DataError as err:
        parser.exit(2, f"error: {err}\n")
    except OSError as err:
        parser.exit(2, f"error: {err}\n".replace("\n", " ").rstrip() + "\n")
    line = summary(kwargs["out_dir"], stamp)
    if line is not None:
        print(line)
    return stamp
