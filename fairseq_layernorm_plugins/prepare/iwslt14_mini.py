"""IWSLT14-mini: a small real IWSLT14 De-En set built from what ``../shared/data/iwslt14``
holds (see its PROVENANCE.md), for CPU experiments, tests and the README's main job.

Everything is already Moses-tokenised, lowercased and BPE-segmented with fairseq's
10k joint merges (``code``), exactly as ``prepare-iwslt14.sh`` makes it:

* train: the two random samples of fairseq's train split (deduplicated) plus the
  fairseq valid split (itself every 23rd train line) minus the lines held out below.
  The samples' BPE is undone and the shared ``code`` re-applied (subword-nmt): the
  ``7a54319`` sample comes out unchanged, but ``7750e75`` was segmented with another
  BPE model (only ~30% of its English lines match the shared codes), which would
  otherwise nearly double the vocabulary;
* valid: every ``valid_every``-th line of the fairseq valid split;
* test: the official test set (dev2010 + dev2012 + tst2010 + tst2011 + tst2012,
  6750 lines), or ``test_lines`` evenly spaced lines of it for quick runs.

The output directory has the layout of ``dataset.py``: ``bin/`` (fairseq data-bin;
separate dictionaries as in fairseq's IWSLT14 recipe, or ``joined=True`` for
``--share-all-embeddings``), ``test.tok.{de,en}`` (references without BPE: tokenised,
lowercased, for tokenised BLEU, the convention for IWSLT14) and ``test.raw.{de,en}``
(the same lines untokenised, from ``orig_de-en``'s xml).
"""

import hashlib
import json
from pathlib import Path

from fairseq_layernorm_plugins.prepare.cli import argument_parser, in_data, positive, run_cli
from fairseq_layernorm_plugins.prepare.dataset import evenly_spaced, subsample, write_dataset
from fairseq_layernorm_plugins.prepare.iwslt14 import TEST_SETS
from fairseq_layernorm_plugins.prepare.moses import xml_segments
from fairseq_layernorm_plugins.prepare.steps import one_at_a_time
from fairseq_layernorm_plugins.prepare.subwords import ApplyBPE, remove_bpe
from fairseq_layernorm_plugins.prepare.textio import DataError, aligned, read_lines, read_parallel

PREPARED = "fairseq_iwslt14.tokenized.de-en"
ORIG = "orig_de-en"
SAMPLES = ("train_samples/lr_samples_first_7750e75", "train_samples/lr_samples_first_7a54319")


def resegment(bpe, line):
    """Undo BPE and re-apply ``bpe`` (so all splits share one segmentation)."""
    return bpe(remove_bpe(line))


def build_splits(iwslt_dir, src="de", tgt="en", valid_every=8, test_lines=None, train_pairs=None, seed=1):
    """Return {"train"|"valid"|"test"|"test.raw": [(src, tgt), ...]} from the shared
    IWSLT14 files ("test.raw": the untokenised xml segments of the same test lines)."""
    iwslt_dir = Path(iwslt_dir)
    if not iwslt_dir.is_dir():
        raise DataError(f"--iwslt-dir {iwslt_dir}: no such folder")
    read_lines(iwslt_dir / PREPARED / "code")  # a clear error if missing, empty or not UTF-8
    bpe = ApplyBPE(iwslt_dir / PREPARED / "code")
    samples = []
    for sample in SAMPLES:
        pairs = read_parallel(iwslt_dir / sample / f"train.{src}", iwslt_dir / sample / f"train.{tgt}")
        samples += [(resegment(bpe, s), resegment(bpe, t)) for s, t in pairs]
    fairseq_valid = read_parallel(iwslt_dir / PREPARED / f"valid.{src}", iwslt_dir / PREPARED / f"valid.{tgt}")
    test = read_parallel(iwslt_dir / PREPARED / f"test.{src}", iwslt_dir / PREPARED / f"test.{tgt}")
    raw = {
        lang: [
            line
            for name in TEST_SETS
            for line in xml_segments(read_lines(iwslt_dir / ORIG / f"{name}.de-en.{lang}.xml"))
        ]
        for lang in (src, tgt)
    }
    test_raw = list(zip(raw[src], raw[tgt]))
    aligned(iwslt_dir / PREPARED / f"test.{src}", test, iwslt_dir / ORIG, test_raw, "test lines")

    valid = fairseq_valid[::valid_every]
    held_out = set(valid)
    train = list(dict.fromkeys(samples + [p for p in fairseq_valid if p not in held_out]))
    train = subsample(train, train_pairs, seed)
    test, test_raw = evenly_spaced(test, test_lines), evenly_spaced(test_raw, test_lines)
    return {"train": train, "valid": valid, "test": test, "test.raw": test_raw}


@one_at_a_time
def prepare(
    iwslt_dir,
    out_dir,
    src="de",
    tgt="en",
    valid_every=8,
    test_lines=None,
    joined=False,
    workers=2,
    force=False,
    train_pairs=None,
    seed=1,
):
    """Build IWSLT14-mini into ``out_dir`` (layout of ``dataset.py``, written atomically);
    skip if already built from the same inputs and options. Returns its stamp."""
    splits = build_splits(iwslt_dir, src, tgt, valid_every, test_lines, train_pairs, seed)
    references = {
        "test.raw": splits.pop("test.raw"),
        "test.tok": [(remove_bpe(s), remove_bpe(t)) for s, t in splits["test"]],
    }
    options = {
        "recipe": "iwslt14-mini",
        "valid_every": valid_every,
        "test_lines": test_lines,
        "train_pairs": train_pairs,
        "seed": seed,
    }
    key = hashlib.sha256(json.dumps([splits, references, options, joined], ensure_ascii=False).encode()).hexdigest()
    return write_dataset(out_dir, key, splits, references, src, tgt, joined, workers, summary=options, force=force)


def main(argv=None):
    parser = argument_parser(__doc__)
    parser.add_argument(
        "--iwslt-dir",
        default=str(Path(__file__).resolve().parents[3] / "shared" / "data" / "iwslt14"),
        help="folder with fairseq_iwslt14.tokenized.de-en/ and train_samples/ (default: ../shared/data/iwslt14)",
    )
    parser.add_argument(
        "--out",
        default=in_data("iwslt14-mini"),
        help="output directory (default: the repo's data/iwslt14-mini, where the iwslt14_mini recipes read it)",
    )
    parser.add_argument("--src", default="de")
    parser.add_argument("--tgt", default="en")
    parser.add_argument(
        "--valid-every", type=positive, default=8, help="hold out every N-th line of fairseq's valid split"
    )
    parser.add_argument(
        "--test-lines", type=positive, default=None, help="use N evenly spaced test lines (default: all 6750)"
    )
    parser.add_argument(
        "--train-pairs",
        type=positive,
        default=None,
        metavar="K",
        help="keep K training pairs, drawn deterministically by --seed",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of --train-pairs (default: 1)")
    parser.add_argument("--joined-dictionary", action="store_true", help="one dictionary for both languages")
    parser.add_argument("--workers", type=positive, default=2)
    parser.add_argument("--force", action="store_true", help="rebuild even if the stamp says it is up to date")
    args = parser.parse_args(argv)
    return run_cli(
        parser,
        prepare,
        args,
        iwslt_dir=args.iwslt_dir,
        out_dir=args.out,
        src=args.src,
        tgt=args.tgt,
        valid_every=args.valid_every,
        test_lines=args.test_lines,
        joined=args.joined_dictionary,
    )


if __name__ == "__main__":
    main()
