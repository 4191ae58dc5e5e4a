"""Gigaword-mini: a headline-generation stand-in from ``../shared/data`` (see its
PROVENANCE.md) in the Gigaword release's own format, through the full Gigaword pipeline
(``gigaword.py``), for CPU work. Real headlines, but few: the 164 English documents of WMT's
newstest2014 (``wmt14/test-full/newstest2014-deen-src.en.sgm``, the only news text offline
that keeps its document structure), each document's first segment as the headline and its
second as the article's first sentence, written as the release writes its text (lower-cased,
Moses-tokenised, digits ``#``); in document order 124 pairs train, 20 valid, 20 test.
Enough to see whether a deep model trains at all on headline pairs; far too few for ROUGE
numbers to mean anything.
"""

import functools
import re
from pathlib import Path

from sacremoses import MosesTokenizer

from fairseq_layernorm_plugins.prepare.cli import (
    add_common_args,
    add_shared_data_arg,
    argument_parser,
    in_data,
    positive,
    run_cli,
)
from fairseq_layernorm_plugins.prepare.gigaword import SPLITS
from fairseq_layernorm_plugins.prepare.gigaword import prepare as prepare_gigaword
from fairseq_layernorm_plugins.prepare.steps import Steps, one_at_a_time
from fairseq_layernorm_plugins.prepare.textio import DataError, write_lines

SGM = Path("wmt14") / "test-full" / "newstest2014-deen-src.en.sgm"
SIZES = {"train": 124, "valid": 20, "test": 20}  # in document order


@functools.cache
def english_tokenizer():
    return MosesTokenizer("en")


def release_text(text):
    """A line as the Gigaword release writes it: lower-cased, Moses-tokenised, digits ``#``."""
    return re.sub(r"\d", "#", english_tokenizer().tokenize(text.lower(), escape=False, return_str=True))


def headline_pairs(sgm):
    """[(first sentence, headline)] of each document of ``sgm`` with two segments or more."""
    docs = re.findall(r"<doc [^>]*>(.*?)</doc>", Path(sgm).read_text(encoding="utf-8"), flags=re.S)
    pairs = []
    for doc in docs:
        segs = re.findall(r"<seg id=\"\d+\">(.*?)</seg>", doc)
        if len(segs) >= 2:
            pairs.append((release_text(segs[1]), release_text(segs[0])))
    return pairs


def write_release(sgm, out):
    """``out`` as the release's ``org_data``: {train,dev,test}.{src,tgt}.txt."""
    pairs = headline_pairs(sgm)
    if len(pairs) != sum(SIZES.values()):
        raise DataError(f"{sgm}: {len(pairs)} documents with a headline, not newstest2014's {sum(SIZES.values())}")
    start = 0
    for split, size in SIZES.items():
        rows, start = pairs[start : start + size], start + size
        for side, index in (("src", 0), ("tgt", 1)):
            write_lines(out / f"{SPLITS[split]}.{side}.txt", [row[index] for row in rows])


@one_at_a_time
def prepare(out_dir, shared_data, merges=500, workers=2, force=False, keep_work=False, **kwargs):
    sgm = Path(shared_data) / SGM
    if not sgm.is_file():
        raise DataError(f"--shared-data {shared_data}: no {SGM}")
    out_dir = Path(out_dir)
    steps = Steps(out_dir.with_name(out_dir.name + ".work"), force)
    release = steps.run("org_data", lambda out: write_release(sgm, out), inputs=[sgm])
    return prepare_gigaword(  # it cleans the shared OUT.work, org_data included
        out_dir,
        raw_dir=release.ready(),
        merges=merges,
        workers=workers,
        force=force,
        keep_work=keep_work,
        source=f"{sgm}: its documents' first two segments (gigaword_mini, a stand-in)",
        **kwargs,
    )


def main(argv=None):
    parser = argument_parser(__doc__)
    add_shared_data_arg(parser)
    parser.add_argument("--merges", type=positive, default=500, help="joint BPE merges (default: 500)")
    parser.add_argument(
        "--out", default=in_data("gigaword-mini"), help="output directory (default: data/gigaword-mini)"
    )
    add_common_args(parser)
    args = parser.parse_args(argv)
    return run_cli(parser, prepare, args, out_dir=args.out, shared_data=args.shared_data, merges=args.merges)


if __name__ == "__main__":
    main()
