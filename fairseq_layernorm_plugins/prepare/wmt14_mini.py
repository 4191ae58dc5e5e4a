"""WMT14-mini: a small real WMT En-De set from ``../shared/data`` (see its
PROVENANCE.md), through the full WMT14 pipeline (``wmt14.py``), for CPU work:

* train: the WMT news test sets other than 2013/2014 (news-test2008, newssyscomb2009,
  newstest2009-2012 and 2015-2018, raw, from ``wmt_news_other/de-en``) plus OpenNMT's
  10k-pair sample of the WMT training corpora (``wmt14/train_sample_opennmt``; it
  comes Moses-tokenised, so it is detokenised first and then goes through the same
  normalise + tokenise steps as the rest);
* valid: newstest2013 (3000); test: newstest2014 full (3003, official sgm).
"""

import functools
from pathlib import Path

from sacremoses import MosesDetokenizer

from fairseq_layernorm_plugins.prepare.cli import add_shared_data_arg, argument_parser, in_data, run_cli
from fairseq_layernorm_plugins.prepare.parallel import map_lines
from fairseq_layernorm_plugins.prepare.steps import Steps, one_at_a_time
from fairseq_layernorm_plugins.prepare.textio import DataError, read_lines, write_lines
from fairseq_layernorm_plugins.prepare.wmt14 import Sources, add_wmt_args
from fairseq_layernorm_plugins.prepare.wmt14 import prepare as prepare_wmt

NEWS_TRAIN = (
    "news-test2008",
    "newssyscomb2009",
    "newstest2009",
    "newstest2010",
    "newstest2011",
    "newstest2012",
    "newstest2015",
    "newstest2016",
    "newstest2017",
    "newstest2018",
)
OPENNMT = {"en": "wmt14/train_sample_opennmt/src-train.txt", "de": "wmt14/train_sample_opennmt/tgt-train.txt"}


class Detokenize:
    """``detokenizer.perl -l LANG`` (undoes the Moses escapes too)."""

    def __init__(self, lang):
        self.detokenizer = MosesDetokenizer(lang=lang)

    def __call__(self, line):
        return self.detokenizer.detokenize(line.split(), unescape=True)


def detokenize_opennmt(shared, workers, out):
    for lang, path in OPENNMT.items():
        write_lines(
            out / f"opennmt.{lang}",
            map_lines(Detokenize(lang), read_lines(shared / path), workers, desc=f"detokenise opennmt.{lang}"),
        )


@one_at_a_time
def prepare(out_dir, shared_data, src="en", tgt="de", merges=8000, workers=2, force=False, **kwargs):
    shared = Path(shared_data)
    if not shared.is_dir():
        raise DataError(f"--shared-data {shared}: no such folder")
    out_dir = Path(out_dir)
    steps = Steps(out_dir.with_name(out_dir.name + ".work"), force)
    opennmt = steps.run(
        "detokenize.opennmt",
        functools.partial(detokenize_opennmt, shared, workers),
        inputs=[shared / p for p in OPENNMT.values()],
    )
    langs = (src, tgt)
    sources = Sources(
        train=[{lang: shared / "wmt_news_other" / "de-en" / f"{name}.{lang}" for lang in langs} for name in NEWS_TRAIN]
        + [{lang: opennmt.path / f"opennmt.{lang}" for lang in langs}],
        valid=[{lang: shared / "wmt14" / "plain" / f"newstest2013.{lang}" for lang in langs}],
        test=[
            {
                lang: shared / "wmt14" / "test-full" / f"newstest2014-deen-{'src' if lang == src else 'ref'}.{lang}.sgm"
                for lang in langs
            }
        ],
    )
    sources.keyed_by = [opennmt, *(path for path in sources.files() if opennmt.path not in path.parents)]
    return prepare_wmt(
        out_dir, sources, src=src, tgt=tgt, merges=merges, workers=workers, force=force, recipe="wmt14-mini", **kwargs
    )


def main(argv=None):
    parser = argument_parser(__doc__)
    add_shared_data_arg(parser)
    parser.add_argument(
        "--out",
        default=in_data("wmt14-mini.en-de"),
        help="output directory (default: the repo's data/wmt14-mini.en-de)",
    )
    add_wmt_args(parser)
    parser.set_defaults(merges=8000)
    args = parser.parse_args(argv)
    return run_cli(
        parser,
        prepare,
        args,
        out_dir=args.out,
        shared_data=args.shared_data,
        src=args.src,
        tgt=args.tgt,
        merges=args.merges,
        sentencepiece=args.sentencepiece,
        joined=not args.separate_dictionaries,
    )


if __name__ == "__main__":
    main()
