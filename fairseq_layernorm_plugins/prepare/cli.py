"""The command-line options and error handling every preparation script shares."""

import logging

from fairseq_layernorm_plugins.prepare.textio import DataError


def add_common_args(parser):
    parser.add_argument(
        "--train-pairs",
        type=int,
        default=None,
        metavar="K",
        help="keep K training pairs, drawn deterministically by --seed (default: all)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of --train-pairs (default: 1)")
    parser.add_argument(
        "--workers", type=int, default=2, help="processes for tokenisation, BPE and binarisation (default: 2)"
    )
    parser.add_argument("--force", action="store_true", help="redo every step even if its stamp is up to date")
    parser.add_argument("--keep-work", action="store_true", help="keep OUT.work/ (intermediate steps) after success")


COMMON = ("train_pairs", "seed", "workers", "force", "keep_work")


def run_cli(parser, fn, args, **kwargs):
    """``fn(**kwargs)`` plus those of the :data:`COMMON` options that ``args`` has (a parse of
    a parser given :func:`add_common_args`, or some of them); a :class:`DataError` exits 2
    with its one-line message."""
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO)
    kwargs.update({name: getattr(args, name) for name in COMMON if hasattr(args, name)})
    try:
        stamp = fn(**kwargs)
    except DataError as err:
        parser.exit(2, f"error: {err}\n")
    print(f"{kwargs['out_dir']}: " + ", ".join(f"{split} {n}" for split, n in stamp["sizes"].items()))
    return stamp
