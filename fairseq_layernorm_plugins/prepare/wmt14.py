"""WMT14 En-De, the "paper" setup (Vaswani et al. 2017; the text steps of fairseq's
``prepare-wmt14en2de.sh --icml17``, News Commentary v9, with newstest2013 as valid where the
script holds out every 100th training line; its default mode takes NC v12):

1. train = Europarl v7 + CommonCrawl + News Commentary v9 (~4.5M pairs); valid =
   newstest2013 (3000); test = newstest2014 *full* (3003, what sacrebleu calls
   ``wmt14/full``). From the statmt.org archives (downloaded or ``--archive-dir``)
   or from local files (``--train``/``--valid``/``--test``; ``.sgm`` is read too);
2. train: ``normalize-punctuation.perl``, ``remove-non-printing-char.perl``, Moses
   tokenisation with aggressive hyphen splitting (``-a``); valid/test: ``’`` -> ``'``
   and the same tokenisation, as the recipe does for newstest2014;
3. joint BPE (subword-nmt, 32000 merges by default; the fairseq script used 40000),
   or ``--sentencepiece VOCAB`` for a joint SentencePiece model on the normalised,
   untokenised text instead of steps 2's tokenisation and BPE;
4. train cleaned after segmentation to 1..250 tokens, ratio 1.5 (clean-corpus-n);
5. ``fairseq-preprocess`` with a joined dictionary (``--share-all-embeddings``), or
   separate ones with ``--separate-dictionaries``.

``--as admin`` is instead the Admin authors' preparation (Transformer-Clinic
``pre-process/wmt14en-de.sh``, adapted from macaron-net): News Commentary **v12** (WMT17's
archive) in place of v9, valid newstest2013 from WMT17's ``dev.tgz`` normalised like train
(punctuation, non-printing characters) before tokenising, train cleaned to **1..80** tokens
with clean-corpus-n's default ratio 9 **before** BPE (on the tokenised text), **32764** joint
BPE merges learned on that cleaned text, nothing cleaned after BPE, no further test sets;
written to ``data/wmt14.en-de.admin`` by default.

``--as b2t`` is the B2T authors' data (their README follows fairseq's ``examples/scaling_nmt``):
Google's preprocessed WMT'16 En-De archive (News Commentary **v11**, Moses-tokenised without
``-a``, cleaned to 1..80 tokens, joint BPE 32k), fetched by hand and binarised as it comes with
a 32768-word joined dictionary, its own newstest2010-2016 as the test sets; see ``wmt14_b2t.py``.
Written to ``data/wmt16.en-de.b2t`` by default.

The untokenised references (``test.raw.*``, ``valid.raw.*``) stay beside the data-bin
for detokenised SacreBLEU; ``test.tok.*`` for tokenised (compound-split) BLEU.

Further test sets (``--extra-tests``; by default the rest of newstest2010-2016, whose
average the B2T paper reports) go through the test set's steps and become fairseq's
``test1``, ``test2``, ... splits; ``stamp.json``'s ``test_sets`` maps each name to its
split. They come from ``--extra-test-dir`` folders (``NAME.LANG``, plain text or sgm) or
from the statmt.org archives SacreBLEU scores them from.
"""

import functools
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import sacrebleu

from fairseq_layernorm_plugins.prepare import wmt14_b2t
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
    NormalizePunctuation,
    Tokenize,
    straight_apostrophe,
    xml_segments,
)
from fairseq_layernorm_plugins.prepare.parallel import Compose, map_lines
from fairseq_layernorm_plugins.prepare.steps import Steps, one_at_a_time
from fairseq_layernorm_plugins.prepare.subwords import (
    ApplyBPE,
    ApplySentencePiece,
    learn_joint_bpe,
    learn_sentencepiece,
)
from fairseq_layernorm_plugins.prepare.textio import DataError, aligned, read_lines, read_parallel, write_lines

logger = logging.getLogger(__name__)

# archive URL, then per corpus its file prefix inside (``{prefix}.{lang}``)
ARCHIVES = {
    "training-parallel-europarl-v7.tgz": (
        "http://statmt.org/wmt13/training-parallel-europarl-v7.tgz",
        "training/europarl-v7.de-en",
    ),
    "training-parallel-commoncrawl.tgz": (
        "http://statmt.org/wmt13/training-parallel-commoncrawl.tgz",
        "commoncrawl.de-en",
    ),
    "training-parallel-nc-v9.tgz": (
        "http://statmt.org/wmt14/training-parallel-nc-v9.tgz",
        "training/news-commentary-v9.de-en",
    ),
}
DEV = ("dev.tgz", "http://statmt.org/wmt14/dev.tgz", "dev/newstest2013")


@dataclass(frozen=True)
class Setup:
    """One published preparation of WMT14 En-De (``--as``): its train archives (``ARCHIVES``'
    shape), dev archive (``DEV``'s), BPE merges, clean-corpus-n bounds (min, max, ratio) and
    whether they apply before BPE (to tokens) or after (to subwords), whether valid is
    punctuation-normalised like train, its output directory and further test sets."""

    name: str
    archives: dict
    dev: tuple
    merges: int
    clean: tuple
    clean_before_bpe: bool
    normalise_valid: bool
    out: str
    extra_tests: tuple


# Admin's pre-process/wmt14en-de.sh (Transformer-Clinic): NC v12 from WMT17, WMT17's dev.tgz
ADMIN_ARCHIVES = {
    **{name: ARCHIVES[name] for name in ("training-parallel-europarl-v7.tgz", "training-parallel-commoncrawl.tgz")},
    "training-parallel-nc-v12.tgz": (
        "http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz",
        "training/news-commentary-v12.de-en",
    ),
}
# the file names of its FILES list (WMT17's dev.tgz holds newstest2013 as WMT14's does)
ADMIN_DEV = ("dev.tgz", "http://data.statmt.org/wmt17/translation-task/dev.tgz", "dev/newstest2013")
TEST = ("test-full.tgz", "http://statmt.org/wmt14/test-full.tgz", "test-full/newstest2014-deen-{side}.{lang}.sgm")
TEST_NAME = "newstest2014"
# The B2T paper's test sets (Takase et al. 2023, Table 1: SacreBLEU on each and their mean)
B2T_TEST_SETS = tuple(f"newstest{year}" for year in range(2010, 2017))
EXTRA_TESTS = tuple(name for name in B2T_TEST_SETS if name != TEST_NAME)

SETUPS = {
    # fairseq's prepare-wmt14en2de.sh (its 40000 merges as 32000), the B2T paper's test sets
    "fairseq": Setup("fairseq", ARCHIVES, DEV, 32000, (1, 250, 1.5), False, False, in_data("wmt14.en-de"), EXTRA_TESTS),
    # Transformer-Clinic pre-process/wmt14en-de.sh: BPE_TOKENS=32764, clean-corpus-n 1 80 before BPE
    "admin": Setup("admin", ADMIN_ARCHIVES, ADMIN_DEV, 32764, (1, 80, 9), True, True, in_data("wmt14.en-de.admin"), ()),
}


def statmt_test_set(name, src, tgt):
    """(archive file name, URL, {lang: member}) of WMT news test set ``name``
    (newstestYYYY), as SacreBLEU's ``wmtYY`` test set defines it."""
    year = re.fullmatch(r"newstest20(\d\d)", name)
    dataset = sacrebleu.DATASETS.get(f"wmt{year.group(1)}") if year else None
    members = dataset.langpairs.get(f"{src}-{tgt}") if dataset else None
    if not members or name not in members[0]:
        raise DataError(
            f"{name}: not a WMT news test set SacreBLEU knows for {src}-{tgt}; give it with --extra-test-dir"
        )
    url = dataset.data[0]
    return f"{dataset.name}-{Path(url).name}", url, {src: members[0], tgt: members[1]}


@dataclass
class Sources:
    """Where each split's text is: per split a list of {lang: path}; .sgm files are
    read as their <seg>s."""

    train: list = field(default_factory=list)
    valid: list = field(default_factory=list)
    test: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # further test sets: {name: {lang: path}}
    keyed_by: list = None  # what keys the text (steps that write it, files); default: its files

    def files(self):
        pairs = [pair for split in (self.train, self.valid, self.test) for pair in split] + list(self.extra.values())
        return [path for pair in pairs for path in pair.values()]

    def keys(self):
        return self.keyed_by if self.keyed_by is not None else self.files()


def read_text(path):
    lines = read_lines(path)
    return xml_segments(lines) if str(path).endswith(".sgm") else lines


def read_split(pairs, src, tgt):
    """Aligned (src, tgt) raw pairs of one split, concatenated over its corpora."""
    out = []
    for pair in pairs:
        a, b = read_text(pair[src]), read_text(pair[tgt])
        aligned(pair[src], a, pair[tgt], b, "lines" if not str(pair[src]).endswith(".sgm") else "<seg>s")
        out += zip(a, b)
    return out


def archive_unpacker(steps, archive_dir, download_dir, done):
    """unpack(name, url, members) -> the folder holding ``members`` of archive ``name``,
    from ``archive_dir`` (it must be there) or downloaded into ``download_dir``; each
    unpacking step is appended to ``done``."""

    def unpack(name, url, members):
        archive = Path(archive_dir) / name if archive_dir else download(url, Path(download_dir) / name)
        step = steps.run(f"unpack.{name}", lambda tmp: extract(archive, tmp, members), inputs=[archive])
        done.append(step)
        return step.path

    return unpack


def standard_sources(steps, src, tgt, archive_dir=None, download_dir=DOWNLOADS, setup=None):
    """Unpack the five statmt.org archives of ``setup`` (default: fairseq's) from
    ``archive_dir`` (each must be there) or, without it, downloaded into ``download_dir``;
    return their Sources and the steps that key them."""
    setup = setup or SETUPS["fairseq"]
    sources, done = Sources(), []
    unpack = archive_unpacker(steps, archive_dir, download_dir, done)

    langs = (src, tgt)
    for name, (url, prefix) in setup.archives.items():
        root = unpack(name, url, [f"{prefix}.{lang}" for lang in langs])
        sources.train.append({lang: root / f"{prefix}.{lang}" for lang in langs})
    dev_name, dev_url, dev_prefix = setup.dev
    root = unpack(dev_name, dev_url, [f"{dev_prefix}.{lang}" for lang in langs])
    sources.valid.append({lang: root / f"{dev_prefix}.{lang}" for lang in langs})
    test_files = {lang: TEST[2].format(side="src" if lang == src else "ref", lang=lang) for lang in langs}
    root = unpack(TEST[0], TEST[1], list(test_files.values()))
    sources.test.append({lang: root / path for lang, path in test_files.items()})
    return sources, done


def extra_test_sources(names, src, tgt, dirs=(), steps=None, archive_dir=None, download_dir=DOWNLOADS):
    """{name: {lang: path}} for each further test set: ``DIR/NAME.LANG`` from the first of
    ``dirs`` that has both files (plain text, or ``NAME.LANG.sgm``), else its statmt.org
    archive (see :func:`statmt_test_set`). Returns (sources, what keys them: the local
    files and the unpacking steps)."""
    found, inputs = {}, []
    unpack = archive_unpacker(steps, archive_dir, download_dir, inputs)
    for name in names:
        candidates = (
            {lang: Path(d) / f"{name}.{lang}{suffix}" for lang in (src, tgt)} for d in dirs for suffix in ("", ".sgm")
        )
        local = next((pair for pair in candidates if all(p.is_file() for p in pair.values())), None)
        if local:
            found[name] = local
            inputs += local.values()
        else:
            archive, url, members = statmt_test_set(name, src, tgt)
            root = unpack(archive, url, list(members.values()))
            found[name] = {lang: root / member for lang, member in members.items()}
    return found, inputs


def extra_splits(names):
    """{fairseq split: test set name} for further test sets: test1, test2, ..."""
    return {f"test{i}": name for i, name in enumerate(names, 1)}


def tokenize(sources, src, tgt, workers, sentencepiece, out, normalise_valid=False):
    """Step 2: normalised (+ tokenised) train; valid/test as segmentation input
    (``{split}.{lang}``), Moses-tokenised (``{split}.tok.{lang}``, the references of
    tokenised BLEU, with SentencePiece too) and raw (``{split}.raw.{lang}``).
    ``normalise_valid``: valid normalised as train before tokenising (Admin's script)."""
    splits = {split: read_split(getattr(sources, split), src, tgt) for split in ("train", "valid", "test")}
    splits.update(
        {split: read_split([sources.extra[name]], src, tgt) for split, name in extra_splits(sources.extra).items()}
    )
    for lang, side in ((src, 0), (tgt, 1)):
        train_fn = [NormalizePunctuation(lang)] + (
            [] if sentencepiece else [Tokenize(lang, aggressive_dash_splits=True)]
        )
        tokenized_fn = Compose(straight_apostrophe, Tokenize(lang, aggressive_dash_splits=True))
        valid_fn = Compose(NormalizePunctuation(lang), Tokenize(lang, aggressive_dash_splits=True))
        write_lines(
            out / f"train.{lang}",
            map_lines(
                Compose(*train_fn), [p[side] for p in splits["train"]], workers, desc=f"normalise+tokenise train.{lang}"
            ),
        )
        for split in [name for name in splits if name != "train"]:
            lines = [p[side] for p in splits[split]]
            write_lines(out / f"{split}.raw.{lang}", lines)
            split_fn = valid_fn if normalise_valid and split == "valid" and not sentencepiece else tokenized_fn
            tokenized = map_lines(split_fn, lines, workers, desc=f"tokenise {split}.{lang}")
            write_lines(out / f"{split}.tok.{lang}", tokenized)
            write_lines(
                out / f"{split}.{lang}", [straight_apostrophe(line) for line in lines] if sentencepiece else tokenized
            )


def clean_pairs(pairs, clean, workers):
    """clean-corpus-n (min, max, ratio) over (src, tgt) pairs: the kept pairs, cleaned."""
    kept = [p for p in map_lines(CleanCorpus(*clean), pairs, workers, desc="clean train") if p]
    logger.info("clean-corpus %s: kept %d of %d train pairs", clean, len(kept), len(pairs))
    return kept


def segment(tok_dir, src, tgt, merges, sentencepiece, workers, extra, out, clean=(1, 250, 1.5), clean_before=False):
    """Steps 3-4: learn joint BPE (or SentencePiece) on train, apply, clean train (before
    segmenting with ``clean_before``, as Admin's script; after, as fairseq's).
    ``extra``: the further test splits (test1, ...)."""
    texts = [read_lines(tok_dir / f"train.{lang}") for lang in (src, tgt)]
    if clean_before:
        kept = clean_pairs(list(zip(*texts)), clean, workers)
        texts = [[s for s, _ in kept], [t for _, t in kept]]
    if sentencepiece:
        learn_sentencepiece(texts, out / "spm", sentencepiece)
        apply = ApplySentencePiece(out / "spm.model")
    else:
        learn_joint_bpe(texts, out / "code", merges)
        apply = ApplyBPE(out / "code")
    seg = {}
    for split in ("train", "valid", "test", *extra):
        for lang, text in zip((src, tgt), texts):
            lines = text if split == "train" else read_lines(tok_dir / f"{split}.{lang}")
            seg[split, lang] = map_lines(apply, lines, workers, desc=f"segment {split}.{lang}")
    if not clean_before:
        train = clean_pairs(list(zip(seg["train", src], seg["train", tgt])), clean, workers)
        seg["train", src], seg["train", tgt] = [s for s, _ in train], [t for _, t in train]
    for (split, lang), lines in seg.items():
        write_lines(out / f"{split}.{lang}", lines)


@one_at_a_time
def prepare(
    out_dir,
    sources=None,
    archive_dir=None,
    download_dir=DOWNLOADS,
    src="en",
    tgt="de",
    merges=None,
    sentencepiece=None,
    joined=True,
    train_pairs=None,
    seed=1,
    workers=2,
    force=False,
    keep_work=False,
    recipe=None,
    extra_tests=(),
    extra_test_dirs=(),
    test_name=TEST_NAME,
    setup="fairseq",
):
    """Build the WMT data directory ``out_dir`` from ``sources`` (a Sources) or the
    standard archives of ``setup`` (a name of :data:`SETUPS`), with the further test sets
    ``extra_tests`` (names; see :func:`extra_test_sources`); returns its stamp (sizes,
    options, test sets). ``merges``: default the setup's."""
    setup = SETUPS[setup]
    merges = merges or setup.merges
    recipe = recipe or ("wmt14" if setup.name == "fairseq" else f"wmt14-{setup.name}")
    admin_like = setup.name != "fairseq"  # keys of fairseq's setup stay as before it had a name
    if archive_dir is not None and not Path(archive_dir).is_dir():
        raise DataError(f"--archive-dir {archive_dir}: no such folder")
    out_dir = Path(out_dir)
    steps = Steps(out_dir.with_name(out_dir.name + ".work"), force)
    if sources is None:
        sources, inputs = standard_sources(steps, src, tgt, archive_dir, download_dir, setup)
    else:
        inputs = sources.keys()
    extra_tests = [name for name in extra_tests if name != test_name]
    sources.extra, extra_inputs = extra_test_sources(
        extra_tests, src, tgt, extra_test_dirs, steps, archive_dir, download_dir
    )
    inputs = inputs + extra_inputs
    extra = extra_splits(extra_tests)
    seg_name = f"spm{sentencepiece}" if sentencepiece else f"bpe{merges}"
    tok = steps.run(
        f"tokenize.{src}-{tgt}" + (".spm" if sentencepiece else ""),
        functools.partial(tokenize, sources, src, tgt, workers, sentencepiece, normalise_valid=setup.normalise_valid),
        inputs=inputs,
        options={"extra_tests": extra_tests, "tokenized_references": True}
        | ({"normalise_valid": True} if setup.normalise_valid else {}),
    )
    seg = steps.run(
        f"{seg_name}.{src}-{tgt}",
        functools.partial(
            segment,
            tok.path,
            src,
            tgt,
            merges,
            sentencepiece,
            workers,
            list(extra),
            clean=setup.clean,
            clean_before=setup.clean_before_bpe,
        ),
        inputs=[tok],
        options=[merges, sentencepiece] + ([setup.clean, setup.clean_before_bpe] if admin_like else []),
    )

    tests = ["test", *extra]
    options = {
        "recipe": recipe,
        **({"setup": setup.name, "clean": list(setup.clean), "clean_before_bpe": True} if admin_like else {}),
        "merges": None if sentencepiece else merges,
        "sentencepiece": sentencepiece,
        "train_pairs": train_pairs,
        "seed": seed,
        "test_sets": {test_name: "test", **{name: split for split, name in extra.items()}},
    }
    key = Steps.key("dataset", [seg], [options, joined])
    stamp = None if force else current_stamp(out_dir, key)
    if stamp is None:
        tok.ready(), seg.ready()
        splits = {
            split: read_parallel(seg.path / f"{split}.{src}", seg.path / f"{split}.{tgt}")
            for split in ("train", "valid", *tests)
        }
        splits["train"] = subsample(splits["train"], train_pairs, seed)
        references = {
            f"{split}.raw": read_parallel(tok.path / f"{split}.raw.{src}", tok.path / f"{split}.raw.{tgt}")
            for split in ("valid", *tests)
        }
        references.update(
            {
                f"{split}.tok": read_parallel(tok.path / f"{split}.tok.{src}", tok.path / f"{split}.tok.{tgt}")
                for split in tests
            }
        )
        model_files = [seg.path / "spm.model"] if sentencepiece else [seg.path / "code"]
        stamp = write_dataset(
            out_dir,
            key,
            splits,
            references,
            src,
            tgt,
            joined,
            workers,
            extra_files=model_files,
            summary=options,
            force=force,
        )
    if not keep_work:
        steps.clean()
    return stamp


def add_wmt_args(parser):
    parser.add_argument("--src", default="en", choices=("en", "de"))
    parser.add_argument("--tgt", default="de", choices=("en", "de"))
    parser.add_argument(
        "--merges", type=positive, default=None, help="joint BPE merges (default: 32000; --as admin: 32764)"
    )
    parser.add_argument(
        "--sentencepiece",
        type=positive,
        default=None,
        metavar="VOCAB",
        help="segment with a joint SentencePiece model of VOCAB pieces instead of Moses + BPE",
    )
    parser.add_argument(
        "--separate-dictionaries", action="store_true", help="one dictionary per language (default: joined)"
    )
    add_common_args(parser)


def local_pair(paths, src, tgt, parser):
    if len(paths) == 1:
        return {lang: Path(f"{paths[0]}.{lang}") for lang in (src, tgt)}
    if len(paths) == 2:
        return {src: Path(paths[0]), tgt: Path(paths[1])}
    parser.error(f"expected PREFIX or SRC_FILE TGT_FILE, got {' '.join(paths)}")


def main(argv=None):
    parser = argument_parser(__doc__)
    parser.add_argument(
        "--archive-dir",
        help="folder holding the statmt.org archives (default: download them to --download-dir); --as b2t: "
        f"holding {wmt14_b2t.ARCHIVE}",
    )
    parser.add_argument(
        "--download-dir",
        default=str(DOWNLOADS),
        help="where archives are downloaded (default: the repo's data/downloads); --as b2t: where the "
        f"{wmt14_b2t.ARCHIVE} you fetched by hand is, without --archive-dir",
    )
    parser.add_argument(
        "--archive-md5",
        type=wmt14_b2t.md5_hex,
        metavar="MD5",
        help=f"--as b2t: the MD5 {wmt14_b2t.ARCHIVE} must have instead of the published one "
        "(an archive you made again with google/seq2seq's wmt16_en_de.sh)",
    )
    for split in ("train", "valid", "test"):
        parser.add_argument(
            f"--{split}",
            nargs="+",
            action="append",
            metavar="PATH",
            help=f"{split} corpus from local files instead of the archives: PREFIX (PREFIX.SRC, PREFIX.TGT) or SRC_FILE TGT_FILE"
            + ("; repeat to concatenate corpora" if split == "train" else ""),
        )
    parser.add_argument(
        "--extra-tests",
        nargs="*",
        default=None,
        metavar="NAME",
        help=f"further test sets, each binarised as test1, test2, ... (default: {' '.join(EXTRA_TESTS)}, with "
        "newstest2014 the rest of the B2T paper's newstest2010-2016; --as admin: none; --as b2t: the archive's own; "
        "none: give the flag alone)",
    )
    parser.add_argument(
        "--extra-test-dir",
        nargs="+",
        default=[],
        metavar="DIR",
        help="folders holding further test sets as NAME.LANG (plain text or .sgm); the others come from "
        "statmt.org (wmtYY-test.tgz in --archive-dir, or downloaded)",
    )
    parser.add_argument(
        "--as",
        dest="setup",
        choices=[*sorted(SETUPS), "b2t"],
        default="fairseq",
        help="whose preparation: fairseq (prepare-wmt14en2de.sh, NC v9, clean 1-250 after BPE; default), admin "
        "(Transformer-Clinic pre-process/wmt14en-de.sh: NC v12, clean 1-80 before BPE, 32764 merges, no further "
        "test sets), the data the Admin paper's WMT14 numbers come from, or b2t (the B2T README's: fairseq's "
        f"examples/scaling_nmt on Google's preprocessed WMT'16 {wmt14_b2t.ARCHIVE}, fetched by hand from "
        f"{wmt14_b2t.URL}; NC v11, BPE 32k, 32768-word joined dictionary)",
    )
    parser.add_argument(
        "--out",
        help="output directory (default: the repo's data/wmt14.en-de; --as admin: data/wmt14.en-de.admin; "
        "--as b2t: data/wmt16.en-de.b2t; "
        "where the wmt14 recipes read them)",
    )
    add_wmt_args(parser)
    args = parser.parse_args(argv)
    if args.extra_tests is None:
        args.extra_tests = list(EXTRA_TESTS if args.setup == "b2t" else SETUPS[args.setup].extra_tests)
    if args.setup == "b2t":
        return wmt14_b2t.run_from_wmt14(parser, args)
    if args.archive_md5:
        parser.error("--archive-md5: only with --as b2t")
    setup = SETUPS[args.setup]
    sources = None
    if args.train or args.valid or args.test:
        if not (args.train and args.valid and args.test):
            parser.error("--train, --valid and --test go together")
        sources = Sources(
            *(
                [local_pair(paths, args.src, args.tgt, parser) for paths in getattr(args, split)]
                for split in ("train", "valid", "test")
            )
        )
    return run_cli(
        parser,
        prepare,
        args,
        out_dir=args.out or setup.out,
        sources=sources,
        archive_dir=args.archive_dir,
        download_dir=args.download_dir,
        src=args.src,
        tgt=args.tgt,
        merges=args.merges,
        sentencepiece=args.sentencepiece,
        joined=not args.separate_dictionaries,
        extra_tests=args.extra_tests,
        extra_test_dirs=args.extra_test_dir,
        setup=args.setup,
    )


if __name__ == "__main__":
    main()
