"""IWSLT14 De-En exactly as fairseq's ``examples/translation/prepare-iwslt14.sh``:

1. from ``de-en.tgz`` (downloaded, ``--archive``, or ``--raw-dir`` already unpacked):
   train = ``train.tags.de-en.*`` minus <url>/<talkid>/<keywords> lines, <title> and
   <description> unwrapped; dev/test = the ``<seg>`` texts of the xml files, ``’`` -> ``'``;
2. Moses tokenisation per language; train cleaned to 1..175 tokens with ratio 1.5
   (clean-corpus-n), then everything lowercased;
3. valid = every 23rd cleaned train line, train = the rest; test = dev2010 +
   TEDX.dev2012 + tst2010 + tst2011 + tst2012 (6750 lines);
4. joint BPE, 10000 merges learned on train (subword-nmt), applied to all splits;
5. ``fairseq-preprocess`` (separate dictionaries as in fairseq's recipe, or joined for
   ``--share-all-embeddings``).

Expected sizes: train 160239, valid 7283, test 6750. The output keeps ``test.tok.*``
(tokenised, lowercased: the conventional tokenised BLEU) and ``test.raw.*`` (the
untokenised xml segments) beside the data-bin. See ``dataset.py`` for the layout.
"""

import functools
import logging
from pathlib import Path

from fairseq_layernorm_plugins.prepare.cli import (
    DOWNLOADS,
    add_common_args,
    argument_parser,
    in_data,
    positive,
    run_cli,
)
from fairseq_layernorm_plugins.prepare.dataset import current_stamp, subsample, write_dataset
from fairseq_layernorm_plugins.prepare.fetch import download, extract
from fairseq_layernorm_plugins.prepare.moses import (
    CleanCorpus,
    Tokenize,
    lowercase,
    straight_apostrophe,
    strip_train_tags,
    xml_segments,
)
from fairseq_layernorm_plugins.prepare.parallel import Compose, map_lines
from fairseq_layernorm_plugins.prepare.steps import Steps, one_at_a_time
from fairseq_layernorm_plugins.prepare.subwords import ApplyBPE, learn_joint_bpe
from fairseq_layernorm_plugins.prepare.textio import DataError, aligned, read_lines, read_parallel, write_lines

logger = logging.getLogger(__name__)

URL = "http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz"
LANGS = ("de", "en")
TEST_SETS = (
    "IWSLT14.TED.dev2010",
    "IWSLT14.TEDX.dev2012",
    "IWSLT14.TED.tst2010",
    "IWSLT14.TED.tst2011",
    "IWSLT14.TED.tst2012",
)
VALID_EVERY = 23


def raw_files():
    """The files of ``de-en.tgz`` the recipe reads (relative to its ``de-en/``)."""
    return [f"train.tags.de-en.{lang}" for lang in LANGS] + [
        f"{name}.de-en.{lang}.xml" for name in TEST_SETS for lang in LANGS
    ]


def build_test_split(raw_dir, src, tgt, workers=1):
    """The test split, tokenised + lowercased and raw: two lists of (src, tgt) pairs."""
    tokenised, raw = [], []
    for name in TEST_SETS:
        segments = {lang: xml_segments(read_lines(raw_dir / f"{name}.de-en.{lang}.xml")) for lang in (src, tgt)}
        aligned(
            raw_dir / f"{name}.de-en.{src}.xml",
            segments[src],
            raw_dir / f"{name}.de-en.{tgt}.xml",
            segments[tgt],
            "<seg>s",
        )
        tok = {
            lang: map_lines(
                Compose(straight_apostrophe, Tokenize(lang), lowercase),
                segments[lang],
                workers,
                desc=f"tokenise {name}.{lang}",
            )
            for lang in (src, tgt)
        }
        tokenised += zip(tok[src], tok[tgt])
        raw += zip(segments[src], segments[tgt])
    return tokenised, raw


def tokenize(raw_dir, src, tgt, workers, out):
    """Step 2-3: tokenised, cleaned, lowercased train/valid/test text, plus raw test refs."""
    raw_dir = Path(raw_dir)
    train = {}
    for lang in (src, tgt):
        lines = [
            line for line in map(strip_train_tags, read_lines(raw_dir / f"train.tags.de-en.{lang}")) if line is not None
        ]
        train[lang] = map_lines(Tokenize(lang), lines, workers, desc=f"tokenise train.{lang}")
    aligned(
        raw_dir / f"train.tags.de-en.{src}", train[src], raw_dir / f"train.tags.de-en.{tgt}", train[tgt], "text lines"
    )
    cleaned = [
        p
        for p in map_lines(CleanCorpus(1, 175, 1.5), list(zip(train[src], train[tgt])), workers, desc="clean train")
        if p
    ]
    logger.info("clean-corpus: kept %d of %d train pairs", len(cleaned), len(train[src]))
    cleaned = [(lowercase(s), lowercase(t)) for s, t in cleaned]
    splits = {
        "valid": [p for i, p in enumerate(cleaned, start=1) if i % VALID_EVERY == 0],
        "train": [p for i, p in enumerate(cleaned, start=1) if i % VALID_EVERY != 0],
    }
    splits["test"], splits["test.raw"] = build_test_split(raw_dir, src, tgt, workers)
    for split, pairs in splits.items():
        write_lines(out / f"{split}.{src}", [s for s, _ in pairs])
        write_lines(out / f"{split}.{tgt}", [t for _, t in pairs])


def apply_bpe(tok_dir, src, tgt, merges, workers, out):
    """Step 4: joint BPE learned on train.src + train.tgt, applied to every split."""
    learn_joint_bpe([read_lines(tok_dir / f"train.{lang}") for lang in (src, tgt)], out / "code", merges)
    bpe = ApplyBPE(out / "code")
    for split in ("train", "valid", "test"):
        for lang in (src, tgt):
            write_lines(
                out / f"{split}.{lang}",
                map_lines(bpe, read_lines(tok_dir / f"{split}.{lang}"), workers, desc=f"bpe {split}.{lang}"),
            )


def locate_raw(steps, archive, raw_dir, download_dir):
    """The unpacked ``de-en/`` directory and what keys it (the archive's step or the files)."""
    if raw_dir is not None:
        raw_dir = Path(raw_dir)
        if not raw_dir.is_dir():
            raise DataError(f"--raw-dir {raw_dir}: no such folder")
        if (raw_dir / "de-en").is_dir():
            raw_dir = raw_dir / "de-en"
        missing = [name for name in raw_files() if not (raw_dir / name).is_file()]
        if missing:
            raise DataError(f"{raw_dir}: missing {', '.join(missing)}")
        return raw_dir, [raw_dir / name for name in raw_files()]
    archive = Path(archive) if archive else download(URL, Path(download_dir) / "de-en.tgz")
    unpacked = steps.run(
        "unpack", lambda tmp: extract(archive, tmp, [f"de-en/{name}" for name in raw_files()]), inputs=[archive]
    )
    return unpacked.path / "de-en", [unpacked]


@one_at_a_time
def prepare(
    out_dir,
    archive=None,
    raw_dir=None,
    download_dir=DOWNLOADS,
    src="de",
    tgt="en",
    merges=10000,
    joined=False,
    train_pairs=None,
    seed=1,
    workers=2,
    force=False,
    keep_work=False,
):
    """Build the IWSLT14 data directory ``out_dir``; returns its stamp (sizes, options)."""
    if {src, tgt} != set(LANGS):
        raise DataError(f"IWSLT14 is de-en: --src/--tgt must be de and en, not {src} and {tgt}")
    out_dir = Path(out_dir)
    steps = Steps(out_dir.with_name(out_dir.name + ".work"), force)
    raw_dir, raw_inputs = locate_raw(steps, archive, raw_dir, download_dir)
    tok = steps.run(f"tokenize.{src}-{tgt}", functools.partial(tokenize, raw_dir, src, tgt, workers), inputs=raw_inputs)
    bpe = steps.run(
        f"bpe{merges}.{src}-{tgt}",
        functools.partial(apply_bpe, tok.path, src, tgt, merges, workers),
        inputs=[tok],
        options=merges,
    )

    options = {"recipe": "iwslt14", "merges": merges, "train_pairs": train_pairs, "seed": seed}
    key = Steps.key("dataset", [bpe], [options, joined])
    stamp = None if force else current_stamp(out_dir, key)
    if stamp is None:
        tok.ready(), bpe.ready()
        splits = {
            split: read_parallel(bpe.path / f"{split}.{src}", bpe.path / f"{split}.{tgt}")
            for split in ("train", "valid", "test")
        }
        splits["train"] = subsample(splits["train"], train_pairs, seed)
        references = {
            name: read_parallel(tok.path / f"{name}.{src}", tok.path / f"{name}.{tgt}") for name in ("test", "test.raw")
        }
        references["test.tok"] = references.pop("test")
        stamp = write_dataset(
            out_dir,
            key,
            splits,
            references,
            src,
            tgt,
            joined,
            workers,
            extra_files=[bpe.path / "code"],
            summary=options,
            force=force,
        )
    if not keep_work:
        steps.clean()
    return stamp


def main(argv=None):
    parser = argument_parser(__doc__)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--archive", help="a local de-en.tgz (default: download it to --download-dir)")
    source.add_argument(
        "--raw-dir", help="an unpacked de-en.tgz (the folder with train.tags.de-en.* and the xml files)"
    )
    parser.add_argument(
        "--download-dir",
        default=str(DOWNLOADS),
        help="where the archive is downloaded (default: the repo's data/downloads)",
    )
    parser.add_argument(
        "--out",
        default=in_data("iwslt14.de-en"),
        help="output directory (default: the repo's data/iwslt14.de-en, where the iwslt14 recipes read it)",
    )
    parser.add_argument("--src", default="de", choices=LANGS)
    parser.add_argument("--tgt", default="en", choices=LANGS)
    parser.add_argument(
        "--merges", type=positive, default=10000, help="joint BPE merges (default: 10000, the recipe's)"
    )
    parser.add_argument(
        "--joined-dictionary",
        action="store_true",
        help="one dictionary for both languages (for --share-all-embeddings)",
    )
    add_common_args(parser)
    args = parser.parse_args(argv)
    return run_cli(
        parser,
        prepare,
        args,
        out_dir=args.out,
        archive=args.archive,
        raw_dir=args.raw_dir,
        download_dir=args.download_dir,
        src=args.src,
        tgt=args.tgt,
        merges=args.merges,
        joined=args.joined_dictionary,
    )


if __name__ == "__main__":
    main()
