"""WMT En-De as the B2T authors prepared it (``fairseq-ln-prepare wmt14 --as b2t``): their
README (takase/b2t_connection) sends you to fairseq's ``examples/scaling_nmt``, which takes
Google's preprocessed WMT'16 En-De and binarises it as it comes:

1. ``wmt16_en_de.tar.gz`` (Google Drive id ``0B_bZck-ksdkpM25jRUN2X2UxMm8``, made by
   google/seq2seq's ``bin/data/wmt16_en_de.sh``): train = Europarl v7 + CommonCrawl + News
   Commentary **v11**, Moses-tokenised (no aggressive hyphen splitting, no punctuation
   normalisation), cleaned to 1..80 tokens (clean-corpus-n, ratio 9), joint BPE of 32000
   merges (``bpe.32000``): ``train.tok.clean.bpe.32000.{en,de}``, 4,500,966 pairs;
   ``newstest2009``-``2016`` as raw text (``newstestYYYY.{en,de}``), tokenised
   (``.tok``) and segmented (``.tok.bpe.32000``). Google Drive hands out a file this large
   only through a browser, so it is fetched by hand into ``--download-dir`` (or any
   ``--archive-dir``); it is checked against the MD5 torchtext publishes for it;
2. ``fairseq-preprocess --source-lang en --target-lang de --trainpref
   train.tok.clean.bpe.32000 --validpref newstest2013.tok.bpe.32000 --testpref
   newstest2014.tok.bpe.32000 --nwordssrc 32768 --nwordstgt 32768 --joined-dictionary``;
   further test sets (by default the rest of the B2T paper's newstest2010-2016) are the
   archive's own ``newstestYYYY.tok.bpe.32000``, binarised as ``test1``, ``test2``, ...
   with the same dictionary (``stamp.json``'s ``test_sets`` maps names to splits).

The layout is ``dataset.py``'s, as ``fairseq-ln-prepare wmt14`` writes it: the archive's raw
test sets as ``test.raw.*`` (and ``valid.raw.*``, ``test1.raw.*``, ...) for detokenised
SacreBLEU, its tokenised ones as ``test.tok.*`` for tokenised (compound-split) BLEU, its
``bpe.32000`` as ``code``; written to ``data/wmt16.en-de.b2t`` by default.
"""

import functools
import logging
import re
from pathlib import Path

from fairseq_layernorm_plugins.prepare.cli import DOWNLOADS, in_data, run_cli
from fairseq_layernorm_plugins.prepare.dataset import current_stamp, subsample, write_dataset
from fairseq_layernorm_plugins.prepare.fetch import check_digest, extract
from fairseq_layernorm_plugins.prepare.steps import Steps, one_at_a_time
from fairseq_layernorm_plugins.prepare.textio import DataError, read_lines, read_parallel

logger = logging.getLogger(__name__)

ARCHIVE = "wmt16_en_de.tar.gz"
URL = "https://drive.google.com/uc?export=download&id=0B_bZck-ksdkpM25jRUN2X2UxMm8"
# The archive's MD5 as torchtext checks its downloads with it (pytorch/text,
# torchtext/datasets/wmt14.py, MD5 beside URL = the Drive id above and _PATH =
# 'wmt16_en_de.tar.gz', download_from_url(..., hash_type='md5'); its NUM_LINES there: train
# 4500966, newstest2013 3000, newstest2014 3003). No sha256 of it is published.
PUBLISHED_MD5 = "874ab6bbfe9c21ec987ed1b9347f95ec"
TRAIN, VALID, TEST = "train.tok.clean.bpe.32000", "newstest2013", "newstest2014"
CODES = "bpe.32000"
NEWSTESTS = tuple(f"newstest{year}" for year in range(2009, 2017))  # the archive's test sets
NWORDS = 32768  # scaling_nmt's --nwordssrc / --nwordstgt
OUT = in_data("wmt16.en-de.b2t")
# options of fairseq-ln-prepare wmt14 that make no sense for an archive that comes segmented
NOT_WITH_B2T = ("merges", "sentencepiece", "train", "valid", "test", "extra_test_dir")


def md5_hex(text):
    """An argparse type: an MD5 digest (32 hexadecimal digits), lower-cased."""
    if not re.fullmatch(r"[0-9a-fA-F]{32}", text):
        raise ValueError(text)
    return text.lower()


md5_hex.__name__ = "MD5 (32 hex digits)"  # argparse's "invalid MD5 (32 hex digits) value: 'x'"


def find_archive(archive_dir=None, download_dir=DOWNLOADS):
    """``ARCHIVE`` in ``archive_dir``, else in ``download_dir``, where the one-line error of a
    missing one says to put it."""
    if archive_dir is not None:
        if not Path(archive_dir).is_dir():
            raise DataError(f"--archive-dir {archive_dir}: no such folder")
        archive = Path(archive_dir) / ARCHIVE
        if not archive.is_file():
            raise DataError(f"{archive}: file not found (--archive-dir must hold Google's {ARCHIVE}, from {URL})")
        return archive
    archive = Path(download_dir) / ARCHIVE
    if not archive.is_file():
        raise DataError(
            f"{URL}: Google Drive serves {ARCHIVE} only through a browser; fetch it yourself "
            f"to {archive} or pass --archive-dir DIR holding it"
        )
    return archive


def check_archive(archive, md5=None):
    """Raise a one-line DataError unless ``archive``'s MD5 is ``md5`` (one you were told,
    for an archive made again with google/seq2seq's script) or, by default, the published one."""
    try:
        check_digest(archive, "md5", md5 or PUBLISHED_MD5)
    except DataError as err:
        fix = "check what --archive-md5 says" if md5 else "an archive you made yourself needs --archive-md5 ITS_MD5"
        raise DataError(f"{err}; {fix}") from None


def aligned_members(src, tgt, tests):
    """The archive members this preparation reads (but the BPE codes), in groups that must
    have as many lines as each other: train's segmented text; valid's segmented and raw
    text; each test set's segmented, tokenised and raw text."""
    langs = (src, tgt)
    groups = [[f"{TRAIN}.{lang}" for lang in langs]]
    groups.append([f"{VALID}{kind}.{lang}" for kind in (".tok.bpe.32000", "") for lang in langs])
    for name in tests:
        groups.append([f"{name}{kind}.{lang}" for kind in (".tok.bpe.32000", ".tok", "") for lang in langs])
    return groups


def line_count(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def unpack(archive, groups, out):
    """Unpack ``archive`` into ``out`` (:func:`~.fetch.extract`: every member of ``groups``
    and the BPE codes must be there) and check that each group's files are aligned."""
    extract(archive, out, [name for group in groups for name in group] + [CODES])
    for group in groups:
        counts = {name: line_count(Path(out) / name) for name in group}
        first = group[0]
        for name, n in counts.items():
            if n != counts[first]:
                raise DataError(f"{archive}: {name} has {n} lines but {first} has {counts[first]}: not aligned")


def count_merges(codes):
    """The merges in a subword-nmt codes file (its lines but a ``#version`` header)."""
    return sum(1 for line in read_lines(codes) if not line.startswith("#version"))


@one_at_a_time
def prepare(
    out_dir,
    archive_dir=None,
    download_dir=DOWNLOADS,
    archive_md5=None,
    src="en",
    tgt="de",
    joined=True,
    extra_tests=(),
    train_pairs=None,
    seed=1,
    workers=2,
    force=False,
    keep_work=False,
):
    """Build the data directory ``out_dir`` from Google's ``wmt16_en_de.tar.gz`` (see
    :func:`find_archive`), checked against ``archive_md5`` or the published MD5, with the
    archive's further test sets ``extra_tests``; returns its stamp."""
    extra_tests = [name for name in dict.fromkeys(extra_tests) if name != TEST]
    unknown = [name for name in extra_tests if name not in NEWSTESTS]
    if unknown:
        raise DataError(f"{', '.join(unknown)}: not in {ARCHIVE} (it holds newstest2009-2016)")
    archive = find_archive(archive_dir, download_dir)
    check_archive(archive, archive_md5)
    out_dir = Path(out_dir)
    tests = {"test": TEST, **{f"test{i}": name for i, name in enumerate(extra_tests, 1)}}
    groups = aligned_members(src, tgt, tests.values())
    steps = Steps(out_dir.with_name(out_dir.name + ".work"), force)
    unpacked = steps.run(
        f"unpack.{ARCHIVE}", functools.partial(unpack, archive, groups), inputs=[archive], options=groups
    )
    options = {
        "recipe": "wmt14-b2t",
        "setup": "b2t",
        "source": f"{ARCHIVE} (Google's preprocessed WMT'16 En-De), as fairseq's examples/scaling_nmt",
        "archive_md5": archive_md5 or PUBLISHED_MD5,
        "published_archive": (archive_md5 or PUBLISHED_MD5) == PUBLISHED_MD5,
        "nwords": NWORDS,
        "train_pairs": train_pairs,
        "seed": seed,
        "test_sets": {name: split for split, name in tests.items()},
    }
    key = Steps.key("dataset", [unpacked], [options, joined])
    stamp = None if force else current_stamp(out_dir, key)
    if stamp is not None:
        logger.info("%s: up to date (made from this archive with these options), nothing to do", out_dir)
    else:
        root = unpacked.ready()

        def pair(prefix):
            return read_parallel(root / f"{prefix}.{src}", root / f"{prefix}.{tgt}")

        splits = {"train": subsample(pair(TRAIN), train_pairs, seed), "valid": pair(f"{VALID}.tok.bpe.32000")}
        splits.update({split: pair(f"{name}.tok.bpe.32000") for split, name in tests.items()})
        references = {"valid.raw": pair(VALID)}
        for split, name in tests.items():
            references[f"{split}.tok"], references[f"{split}.raw"] = pair(f"{name}.tok"), pair(name)
        stamp = write_dataset(
            out_dir,
            key,
            splits,
            references,
            src,
            tgt,
            joined,
            workers,
            extra_files=[(root / CODES, "code")],
            summary={**options, "merges": count_merges(root / CODES)},
            force=force,
            nwords=NWORDS,
        )
    if not keep_work:
        steps.clean()
    return stamp


def run_from_wmt14(parser, args):
    """``fairseq-ln-prepare wmt14 --as b2t``: ``args`` parsed by ``wmt14.main``'s parser;
    its options that this preparation has no use for are refused in one line."""
    given = [f"--{name.replace('_', '-')}" for name in NOT_WITH_B2T if getattr(args, name)]
    if given:
        parser.error(
            f"{', '.join(given)}: not with --as b2t ({ARCHIVE} comes tokenised and BPE-segmented, "
            "with its own test sets)"
        )
    return run_cli(
        parser,
        prepare,
        args,
        out_dir=args.out or OUT,
        archive_dir=args.archive_dir,
        download_dir=args.download_dir,
        archive_md5=args.archive_md5,
        src=args.src,
        tgt=args.tgt,
        joined=not args.separate_dictionaries,
        extra_tests=args.extra_tests,
    )
