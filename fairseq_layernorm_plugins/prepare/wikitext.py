"""WikiText-103 and WikiText-2 (Merity et al. 2016, "Pointer Sentinel Mixture Models"),
the word-level language-modelling corpora of Wikipedia's Good and Featured articles:
WikiText-103 is the corpus of the B2T paper's Table 3 (Baevski and Auli's adaptive-input
LM), WikiText-2 its small sibling for CPU-scale runs (the same valid and test articles).

1. ``wikitext-103-v1.zip`` / ``wikitext-2-v1.zip`` from Salesforce's WikiText page (the
   URLs of fairseq's ``examples/language_model/prepare-wikitext-103.sh`` and torchtext),
   downloaded into ``DOWNLOAD_DIR/wikitext/`` (kept as a cache) and checked against the
   archive's published sha256, or ``--archive`` (a local zip), or ``--raw-dir`` (a folder
   holding ``wiki.{train,valid,test}.tokens``, each checked against its published digest);
   WikiText-2 reads ``../shared/data/wikitext2`` when that folder exists;
2. the text as it is (tokenised, rare words already ``<unk>``); ``--train-lines N`` keeps
   the first N training lines (a prefix in corpus order, not a sample: quick runs);
3. fairseq's word-level preprocessing of its language-model example::

       fairseq-preprocess --only-source --trainpref wiki.train.tokens \\
           --validpref wiki.valid.tokens --testpref wiki.test.tokens --destdir OUT/bin

   (one dictionary, counted over train only; fairseq appends ``</s>`` to every line,
   blank lines included, and pads the dictionary to a multiple of 8).

Sizes (Merity et al. 2016, Table 1; lines as torchtext's ``NUM_LINES``), tokens counting
one end-of-line per line:

=============  ====================  ===================  ===================
corpus         train                 valid                test
=============  ====================  ===================  ===================
WikiText-103   28,475 articles,      60 articles,         60 articles,
               1,801,350 lines,      3,760 lines,         4,358 lines,
               103,227,021 tokens    217,646 tokens       245,569 tokens
WikiText-2     600 articles,         60 articles,         60 articles,
               36,718 lines,         3,760 lines,         4,358 lines,
               2,088,628 tokens      217,646 tokens       245,569 tokens
=============  ====================  ===================  ===================

Vocabulary (the paper's): 267,735 and 33,278 types; for WikiText-2 these are train's
33,277 whitespace-separated words (``<unk>`` among them) and the end of line. fairseq's
dictionary holds ``<s>``, ``<pad>``, ``</s>``, ``<unk>`` and train's other words, padded
to a multiple of 8: 33,280 entries for WikiText-2 (checked by the tests on the real files).

Output (see ``dataset.py`` for the other corpora's):

    OUT/{train,valid,test}.tokens   the text fairseq-preprocess read
    OUT/bin/                        the data-bin of ``--task language_modeling``
    OUT/stamp.json                  sizes (lines), tokens, dictionary size, options, key

Licence: CC BY-SA 3.0 (text from Wikipedia), Salesforce Research.
"""

import logging
import shutil
import subprocess
import sys
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from fairseq_layernorm_plugins.prepare.cli import DOWNLOADS, argument_parser, in_data, positive, run_cli
from fairseq_layernorm_plugins.prepare.dataset import current_stamp
from fairseq_layernorm_plugins.prepare.fetch import check_digest, download, verify
from fairseq_layernorm_plugins.prepare.output import output_directory, write_stamp
from fairseq_layernorm_plugins.prepare.steps import Steps, one_at_a_time
from fairseq_layernorm_plugins.prepare.textio import DataError

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")
FILES = tuple(f"wiki.{split}.tokens" for split in SPLITS)
SHARED_RAW = Path(__file__).resolve().parents[3] / "shared" / "data" / "wikitext2"
BASE_URL = "https://s3.amazonaws.com/research.metamind.io/wikitext"


@dataclass(frozen=True)
class Corpus:
    name: str  # the command's name: wikitext103, wikitext2
    folder: str  # the folder inside the archive, and the default output's name
    archive: str
    sha256: str  # of the archive
    files: dict  # {file: (hash algorithm, digest)}: the token files, for --raw-dir

    @property
    def url(self):
        return f"{BASE_URL}/{self.archive}"


# The archives' sha256 as published by ml-explore/mlx-data (python/mlx/data/datasets/wikitext.py,
# SUBSETS, which checks downloads with them), the same in dellison/WikiText.jl (src/WikiText.jl,
# DataDeps registration); torchtext publishes MD5s of the same URLs (pytorch/text,
# torchtext/datasets/wikitext103.py 9ddaacaf6af0710eda8c456decff7832 and wikitext2.py
# 542ccefacc6c27f945fb54453812b3cd). The token files' SHA-1 are dmlc/gluon-nlp's
# (src/gluonnlp/data/corpora/wikitext.py, WikiText2/WikiText103 _data_file); WikiText-2's
# sha256 are those of ../shared/data/wikitext2/PROVENANCE.md, whose files also have
# gluon-nlp's SHA-1 (the archive's members, byte for byte).
CORPORA = {
    "wikitext103": Corpus(
        "wikitext103",
        "wikitext-103",
        "wikitext-103-v1.zip",
        "242ba0f20b329cfdf1ccc61e9e9e5b59becf189db7f7a81cd2a0e2fc31539590",
        {
            "wiki.train.tokens": ("sha1", "b7497e2dfe77e72cfef5e3dbc61b7b53712ac211"),
            "wiki.valid.tokens": ("sha1", "c326ac59dc587676d58c422eb8a03e119582f92b"),
            "wiki.test.tokens": ("sha1", "8a5befc548865cec54ed4273cf87dbbad60d1e47"),
        },
    ),
    "wikitext2": Corpus(
        "wikitext2",
        "wikitext-2",
        "wikitext-2-v1.zip",
        "92675f1d63015c1c8b51f1656a52d5bdbc33aafa60cc47a218a66e7ee817488c",
        {
            "wiki.train.tokens": ("sha256", "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f"),
            "wiki.valid.tokens": ("sha256", "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8"),
            "wiki.test.tokens": ("sha256", "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0"),
        },
    ),
}


def corpus_of(name):
    if name not in CORPORA:
        raise DataError(f"unknown WikiText corpus {name!r} (choose from {', '.join(CORPORA)})")
    return CORPORA[name]


def default_raw_dir(corpus):
    """../shared/data/wikitext2 for WikiText-2 when it exists, else None (download)."""
    return SHARED_RAW if corpus == "wikitext2" and SHARED_RAW.is_dir() else None


def raw_files(corpus, raw_dir):
    """{file: path} of the verified token files in ``raw_dir`` (or in its ``wikitext-2/``
    or ``wikitext-103/`` folder: an unpacked archive)."""
    corpus = corpus_of(corpus)
    raw_dir = Path(raw_dir)
    if not raw_dir.is_dir():
        raise DataError(f"--raw-dir {raw_dir}: no such folder")
    if (raw_dir / corpus.folder).is_dir():
        raw_dir = raw_dir / corpus.folder
    files = {name: raw_dir / name for name in FILES}
    for path in files.values():
        if not path.is_file():
            raise DataError(f"{path}: file not found (--raw-dir must hold {', '.join(FILES)})")
    for name, path in files.items():
        check_digest(path, *corpus.files[name])
    return files


def fetch_archive(corpus, archive=None, download_dir=DOWNLOADS, url=None, retries=3, wait=5.0):
    """The verified archive: ``archive`` (a local copy) or downloaded from ``url`` (default:
    Salesforce's) into ``download_dir/wikitext/``, where a second run finds it."""
    corpus = corpus_of(corpus)
    if archive is not None:
        archive = Path(archive)
        if not archive.is_file():
            raise DataError(f"{archive}: archive not found")
        verify(archive, corpus.sha256)
        return archive
    return download(
        url or corpus.url,
        Path(download_dir) / "wikitext" / corpus.archive,
        retries=retries,
        wait=wait,
        checksum=corpus.sha256,
        hint=f"pass --raw-dir DIR holding {', '.join(FILES)}",
    )


def unzip(archive, folder, out):
    """Unpack ``folder/wiki.*.tokens`` of the zip ``archive`` into ``out`` (flat); a
    missing member or a corrupt or truncated archive is a one-line error naming it."""
    archive = Path(archive)
    members = [f"{folder}/{name}" for name in FILES]
    try:
        with zipfile.ZipFile(archive) as zf:
            missing = [m for m in members if m not in set(zf.namelist())]
            if missing:
                raise DataError(f"{archive}: missing {', '.join(missing)}")
            for member in members:
                with zf.open(member) as src, open(Path(out) / Path(member).name, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)  # checks the CRC at the end
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as err:
        raise DataError(f"{archive}: corrupt or truncated archive ({err})") from None


def copy_text(src, dst, limit=None):
    """Copy the first ``limit`` lines (all if None) of ``src`` to ``dst`` byte for byte,
    checking that each is UTF-8; returns (lines, tokens), tokens as fairseq counts them
    (whitespace-separated words plus one ``</s>`` per line)."""
    lines = tokens = 0
    with open(src, "rb") as f, open(dst, "wb") as out:
        for raw in f:
            if limit is not None and lines >= limit:
                break
            lines += 1
            try:
                tokens += len(raw.decode("utf-8").split()) + 1
            except UnicodeDecodeError as err:
                raise DataError(f"{src}:{lines}: invalid UTF-8 ({err.reason} at byte {err.start})") from None
            out.write(raw if raw.endswith(b"\n") else raw + b"\n")
    if tokens == lines:
        raise DataError(f"{src}: empty or all-blank file")
    return lines, tokens


def binarise(text_dir, destdir, workers=2):
    """``fairseq-preprocess --only-source`` over ``text_dir/{train,valid,test}.tokens``
    (the real one, from the running environment), as fairseq's language-model example."""
    cmd = [str(Path(sys.executable).parent / "fairseq-preprocess"), "--only-source"]
    for split in SPLITS:
        cmd += [f"--{split}pref", str(Path(text_dir) / f"{split}.tokens")]
    cmd += ["--destdir", str(destdir), "--workers", str(workers)]
    logger.info("fairseq-preprocess --only-source -> %s", destdir)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"fairseq-preprocess failed:\n{proc.stderr[-3000:]}")


def dictionary_size(bin_dir):
    """Entries of fairseq's dictionary: dict.txt's lines plus its 4 specials (<s>, <pad>, </s>, <unk>)."""
    with open(Path(bin_dir) / "dict.txt", encoding="utf-8") as f:
        return 4 + sum(1 for _ in f)


def write_dataset(out_dir, key, files, train_lines=None, workers=2, summary=None):
    """Write ``out_dir`` atomically from the token files ``files`` ({wiki.SPLIT.tokens: path});
    returns the stamp's content."""
    content = {"key": key, **(summary or {})}
    with output_directory(out_dir) as tmp:
        sizes, tokens = {}, {}
        for split, name in zip(SPLITS, FILES):
            limit = train_lines if split == "train" else None
            sizes[split], tokens[split] = copy_text(files[name], tmp / f"{split}.tokens", limit)
        binarise(tmp, tmp / "bin", workers)
        content.update(sizes=sizes, tokens=tokens, dictionary=dictionary_size(tmp / "bin"))
        write_stamp(tmp, content)
    return content


@one_at_a_time
def prepare(
    out_dir,
    corpus="wikitext2",
    raw_dir=None,
    archive=None,
    download_dir=DOWNLOADS,
    url=None,
    train_lines=None,
    workers=2,
    force=False,
    keep_work=False,
):
    """Build the WikiText data directory ``out_dir`` from ``raw_dir`` (the token files),
    else ``archive`` or the download; returns its stamp (sizes, tokens, options)."""
    corpus = corpus_of(corpus)
    if train_lines is not None and train_lines < 1:
        raise DataError(f"--train-lines must be at least 1, not {train_lines}")
    out_dir = Path(out_dir)
    steps = Steps(out_dir.with_name(out_dir.name + ".work"), force)
    if raw_dir is not None:
        files = raw_files(corpus.name, raw_dir)
        inputs, source = list(files.values()), str(raw_dir)
        unpacked = None
    else:
        path = fetch_archive(corpus.name, archive, download_dir, url)
        unpacked = steps.run(f"unpack.{corpus.archive}", lambda tmp: unzip(path, corpus.folder, tmp), inputs=[path])
        files = {name: unpacked.path / name for name in FILES}
        inputs, source = [unpacked], corpus.archive

    options = {"recipe": corpus.name, "train_lines": train_lines}
    key = Steps.key("dataset", inputs, options)
    stamp = None if force else current_stamp(out_dir, key)
    if stamp is None:
        if unpacked is not None:
            unpacked.ready()
        stamp = write_dataset(out_dir, key, files, train_lines, workers, summary={**options, "source": source})
    else:
        logger.info("%s: up to date, skipped", out_dir)
    if not keep_work:
        steps.clean()
    return stamp


def command(corpus, argv=None):
    """The command line of one corpus (``fairseq-ln-prepare wikitext103`` / ``wikitext2``)."""
    spec = corpus_of(corpus)
    shared = default_raw_dir(corpus)
    parser = argument_parser(__doc__)
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--raw-dir",
        default=shared,
        help="folder holding wiki.{train,valid,test}.tokens (default: "
        + ("../shared/data/wikitext2 if present, else " if corpus == "wikitext2" else "")
        + f"download {spec.archive})",
    )
    source.add_argument("--archive", help=f"a local {spec.archive} (default: download it to --download-dir/wikitext)")
    parser.add_argument(
        "--download-dir", default=str(DOWNLOADS), help="download cache (default: the repo's data/downloads)"
    )
    parser.add_argument(
        "--out",
        default=in_data(spec.folder),
        help=f"output directory (default: the repo's data/{spec.folder}, where the {corpus} recipes read it)",
    )
    parser.add_argument(
        "--train-lines",
        type=positive,
        default=None,
        metavar="N",
        help="keep the first N training lines, in corpus order (default: all)",
    )
    parser.add_argument("--workers", type=positive, default=2, help="processes for binarisation (default: 2)")
    parser.add_argument("--force", action="store_true", help="redo every step even if its stamp is up to date")
    parser.add_argument("--keep-work", action="store_true", help="keep OUT.work/ (intermediate steps) after success")
    args = parser.parse_args(argv)
    if args.archive is not None:
        args.raw_dir = None  # an explicit archive wins over the shared default
    return run_cli(
        parser,
        prepare,
        args,
        out_dir=args.out,
        corpus=corpus,
        raw_dir=args.raw_dir,
        archive=args.archive,
        download_dir=args.download_dir,
        train_lines=args.train_lines,
    )


def script(argv=None):
    """``python scripts/prepare_wikitext.py CORPUS [options]``."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in CORPORA:
        if argv and argv[0] in ("-h", "--help"):
            print(
                f"usage: {Path(sys.argv[0]).name} {{{','.join(CORPORA)}}} [options]\n\n{__doc__.split(chr(10) * 2)[0]}"
            )
            sys.exit(0)
        print(
            f"error: name a corpus first ({', '.join(CORPORA)})" + (f", not {argv[0]!r}" if argv else ""),
            file=sys.stderr,
        )
        sys.exit(2)
    sys.argv[0] = f"{Path(sys.argv[0]).name} {argv[0]}"
    return command(argv[0], argv[1:])
