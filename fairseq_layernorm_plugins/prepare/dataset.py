"""The last steps shared by every recipe: optional subsampling of the training pairs,
then the output directory, written atomically (and only over a folder a preparation wrote
itself: see ``output.py``):

    OUT/{train,valid,test}.{src,tgt}   segmented text (what fairseq-preprocess read)
    OUT/test1.{src,tgt}, ...           further test sets, if any (fairseq's test1, test2, ...)
    OUT/test.tok.{src,tgt}             references before segmentation (tokenised BLEU)
    OUT/test.raw.{src,tgt}             untokenised references (SacreBLEU), likewise valid
    OUT/bin/                           the fairseq data-bin
    OUT/stamp.json                     sizes, options, the key of the inputs, the files written
"""

import logging
import random
import shutil
from pathlib import Path

from fairseq_layernorm_plugins.prepare.output import output_directory, read_stamp, write_stamp
from fairseq_layernorm_plugins.prepare.textio import fairseq_preprocess, write_lines

logger = logging.getLogger(__name__)


def subsample(pairs, k, seed=1):
    """``k`` pairs drawn without replacement by ``seed``, in corpus order (all if fewer)."""
    if k is None or k >= len(pairs):
        return list(pairs)
    keep = sorted(random.Random(seed).sample(range(len(pairs)), k))
    return [pairs[i] for i in keep]


def evenly_spaced(items, n):
    """``n`` items spread evenly over ``items`` (every ``len // n``-th, from the first); all if ``n`` is None."""
    if not n:
        return list(items)
    return list(items)[:: max(1, len(items) // n)][:n]


def test_splits(splits):
    """The test split names in fairseq's order: test, test1, test2, ..."""
    return sorted((name for name in splits if name.startswith("test")), key=lambda name: int(name[4:] or 0))


def current_stamp(out_dir, key):
    """The stamp of ``out_dir`` if it was written from ``key`` (up to date), else None."""
    content = read_stamp(out_dir) or {}
    return content if content.get("key") == key else None


def write_dataset(
    out_dir,
    key,
    splits,
    references,
    src,
    tgt,
    joined=False,
    workers=2,
    extra_files=(),
    summary=None,
    force=False,
    nwords=None,
):
    """Write the output directory unless its stamp already has ``key``.

    splits: {"train"|"valid"|"test"|"test1"|...: [(src, tgt), ...]} (segmented); references:
    {"test.tok": [(src, tgt)], "test.raw": [...], ...}; extra_files: paths copied in
    (the BPE codes, a SentencePiece model), each under its own name or, given as a
    (path, name) pair, under ``name``; nwords: the dictionaries' size limit
    (:func:`~.textio.fairseq_preprocess`). Returns the stamp's content."""
    out_dir = Path(out_dir)
    if not force and (stamp := current_stamp(out_dir, key)):
        logger.info("%s: up to date, skipped", out_dir)
        return stamp
    content = {
        "key": key,
        "src": src,
        "tgt": tgt,
        "joined_dictionary": joined,
        "sizes": {split: len(pairs) for split, pairs in splits.items()},
        **(summary or {}),
    }
    with output_directory(out_dir) as tmp:
        for name, pairs in {**splits, **references}.items():
            write_lines(tmp / f"{name}.{src}", [s for s, _ in pairs])
            write_lines(tmp / f"{name}.{tgt}", [t for _, t in pairs])
        for item in extra_files:
            path, name = item if isinstance(item, tuple) else (item, Path(item).name)
            shutil.copy(path, tmp / name)
        logger.info("fairseq-preprocess -> %s", out_dir / "bin")
        fairseq_preprocess(
            tmp / "train",
            tmp / "valid",
            [tmp / name for name in test_splits(splits)],
            tmp / "bin",
            src,
            tgt,
            joined,
            workers,
            nwords,
        )
        write_stamp(tmp, content)
    return content
