"""Gigaword headline generation (``fairseq-ln-prepare gigaword``): Rush et al. (2015)'s
sentence-headline pairs from Annotated English Gigaword, as the B2T paper (Sec. 6.2) trains
on them, from the release users get today.

1. The archive: harvardnlp/sent-summary's data as UniLM repackaged it ("org_data", which
   TensorFlow Datasets and Hugging Face datasets read), one archive on Google Drive (id
   ``1USoQ8lJgN8kAWnUnRrupMGrPMLlDVqlV``, 578,402,958 bytes) holding
   ``org_data/{train,dev,test}.{src,tgt}.txt``: 3,803,957 / 189,651 / 1,951 pairs, the
   article's first sentence (``src``) and its headline (``tgt``), already lower-cased and
   tokenised, digits written ``#``. Google Drive hands a file this large only to a browser,
   so it is fetched by hand into ``--download-dir`` (or named with ``--archive``); it is
   checked against its sha256 (``--archive-sha256`` for one you rebuilt). ``--raw-dir`` takes
   the unpacked ``org_data`` folder instead.
2. Unknown words: train and dev write them ``<unk>``, test ``UNK``. As TensorFlow Datasets
   (gigaword 1.2.0) and Hugging Face datasets do, ``<unk>`` becomes ``UNK`` in train and dev,
   so that every split has one spelling, an ordinary word the model may also generate (and
   ROUGE counts it, as in every published Gigaword score that uses this release).
3. Joint BPE with 32,000 merges (``--merges``; the paper: "BPE with 32K merge operations ...
   shared by the encoder and decoder") learnt with subword-nmt on train's sources and
   headlines, applied to every split; ``fairseq-preprocess --joined-dictionary``.

The layout is ``dataset.py``'s: ``{train,valid,test}.{src,tgt}`` segmented, ``test.tok.*``
and ``valid.tok.*`` the pairs before BPE (ROUGE's references), ``code``, ``bin/``, written to
``data/gigaword`` by default.
"""

import functools
import logging
import shutil
import tarfile
import zipfile
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
from fairseq_layernorm_plugins.prepare.fetch import check_digest
from fairseq_layernorm_plugins.prepare.parallel import map_lines
from fairseq_layernorm_plugins.prepare.steps import Steps, one_at_a_time
from fairseq_layernorm_plugins.prepare.subwords import ApplyBPE, learn_joint_bpe
from fairseq_layernorm_plugins.prepare.textio import DataError, read_parallel, write_lines

logger = logging.getLogger(__name__)

ARCHIVE = "ggw_data.zip"  # the name it is commonly saved under (any name: --archive)
URL = "https://drive.google.com/uc?export=download&id=1USoQ8lJgN8kAWnUnRrupMGrPMLlDVqlV"
SHA256 = "bc0c4a2e1aa19cf2123688b87bc2d778c0d8fc24a4090e3c10a27c5faa1b898b"
SPLITS = {"train": "train", "valid": "dev", "test": "test"}  # fairseq's split: the release's
MEMBERS = [f"org_data/{name}.{side}.txt" for name in SPLITS.values() for side in ("src", "tgt")]
MERGES = 32000
OUT = in_data("gigaword")


def find_archive(archive=None, download_dir=DOWNLOADS):
    """The archive named by ``--archive``, else ``ARCHIVE`` in ``download_dir``, where the
    one-line error of a missing one says to put it."""
    if archive is not None:
        if not Path(archive).is_file():
            raise DataError(f"--archive {archive}: file not found")
        return Path(archive)
    archive = Path(download_dir) / ARCHIVE
    if not archive.is_file():
        raise DataError(
            f"{URL}: Google Drive serves the Gigaword archive only through a browser; fetch it "
            f"yourself to {archive}, or pass --archive FILE, or --raw-dir DIR holding its org_data/"
        )
    return archive


def unpack(archive, out):
    """The release's six text files from ``archive`` (zip or tar) into ``out/org_data``; a
    corrupt archive or a missing file is a one-line error naming it."""
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as z:
                names = {name.removeprefix("./") for name in z.namelist()}
                _require(archive, names)
                for member in MEMBERS:
                    with z.open(member) as src, open(out / Path(member).name, "wb") as dst:
                        shutil.copyfileobj(src, dst)
        else:
            with tarfile.open(archive) as tar:
                members = {member.name.removeprefix("./"): member for member in tar.getmembers()}
                _require(archive, members)
                for member in MEMBERS:
                    with tar.extractfile(members[member]) as src, open(out / Path(member).name, "wb") as dst:
                        shutil.copyfileobj(src, dst)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as err:
        raise DataError(f"{archive}: corrupt or truncated archive ({' '.join(str(err).split())})") from None


def _require(archive, names):
    missing = [member for member in MEMBERS if member not in names]
    if missing:
        raise DataError(f"{archive}: missing {', '.join(missing)} (not the org_data release?)")


def raw_folder(raw_dir):
    """``raw_dir`` or its ``org_data/``, whichever holds the six files."""
    for folder in (Path(raw_dir) / "org_data", Path(raw_dir)):
        if all((folder / Path(member).name).is_file() for member in MEMBERS):
            return folder
    raise DataError(f"--raw-dir {raw_dir}: no {', '.join(Path(m).name for m in MEMBERS)} (in it or its org_data/)")


def one_unknown_word(line):
    """Train's and dev's ``<unk>`` written as test's ``UNK`` (TensorFlow Datasets' gigaword 1.2.0)."""
    return line.replace("<unk>", "UNK")


def segment(raw, merges, workers, out):
    """Learn joint BPE on train (sources, then headlines), apply it to every split; write
    the pairs before BPE too (``SPLIT.tok.*``)."""
    pairs = {split: read_parallel(raw / f"{name}.src.txt", raw / f"{name}.tgt.txt") for split, name in SPLITS.items()}
    for split in ("train", "valid"):
        pairs[split] = [(one_unknown_word(s), one_unknown_word(t)) for s, t in pairs[split]]
    for split, rows in pairs.items():
        for i, row in enumerate(rows):
            for side, text in zip(("src", "tgt"), row):
                if not text.strip():
                    raise DataError(f"{raw / SPLITS[split]}.{side}.txt: line {i + 1} is empty")
    learn_joint_bpe([[s for s, _ in pairs["train"]], [t for _, t in pairs["train"]]], out / "code", merges)
    apply = ApplyBPE(out / "code")
    for split, rows in pairs.items():
        for side, index in (("src", 0), ("tgt", 1)):
            text = [row[index] for row in rows]
            write_lines(out / f"{split}.tok.{side}", text)
            write_lines(out / f"{split}.{side}", map_lines(apply, text, workers, desc=f"segment {split}.{side}"))


@one_at_a_time
def prepare(
    out_dir,
    raw_dir=None,
    archive=None,
    download_dir=DOWNLOADS,
    archive_sha256=None,
    merges=MERGES,
    train_pairs=None,
    seed=1,
    workers=2,
    force=False,
    keep_work=False,
    source=None,
):
    """Build the Gigaword data directory ``out_dir`` from the org_data release (``raw_dir``,
    or the archive: :func:`find_archive`, checked against ``archive_sha256`` or the published
    sha256); returns its stamp (``source``, with ``raw_dir`` only: what that folder holds, for
    the stamp, when it is not the release)."""
    out_dir = Path(out_dir)
    steps = Steps(out_dir.with_name(out_dir.name + ".work"), force)
    if raw_dir is not None:
        raw = raw_folder(raw_dir)
        inputs, source = [raw / Path(member).name for member in MEMBERS], source or f"{raw} (the org_data release)"
        unpacked = None
    else:
        path = find_archive(archive, download_dir)
        try:
            check_digest(path, "sha256", archive_sha256 or SHA256)
        except DataError as err:
            fix = "check what --archive-sha256 says" if archive_sha256 else "one you rebuilt needs --archive-sha256"
            raise DataError(f"{err}; {fix}") from None
        unpacked = steps.run("unpack", functools.partial(unpack, path), inputs=[path])
        inputs, source = [unpacked], f"{path.name} (sha256 {archive_sha256 or SHA256})"
    seg = steps.run(
        f"bpe{merges}",
        lambda out: segment(raw if unpacked is None else unpacked.ready(), merges, workers, out),
        inputs=inputs,
        options={"merges": merges, "unknown_word": "UNK"},
    )
    options = {
        "recipe": "gigaword",
        "source": source,
        "merges": merges,
        "unknown_word": "<unk> in train and dev written UNK, as test (TensorFlow Datasets' gigaword 1.2.0)",
        "train_pairs": train_pairs,
        "seed": seed,
    }
    key = Steps.key("dataset", [seg], [options])
    stamp = None if force else current_stamp(out_dir, key)
    if stamp is not None:
        logger.info("%s: up to date (made from these files with these options), nothing to do", out_dir)
    else:
        root = seg.ready()
        splits = {split: read_parallel(root / f"{split}.src", root / f"{split}.tgt") for split in SPLITS}
        splits["train"] = subsample(splits["train"], train_pairs, seed)
        references = {
            f"{split}.tok": read_parallel(root / f"{split}.tok.src", root / f"{split}.tok.tgt")
            for split in ("valid", "test")
        }
        stamp = write_dataset(
            out_dir,
            key,
            splits,
            references,
            "src",
            "tgt",
            joined=True,
            workers=workers,
            extra_files=[root / "code"],
            summary=options,
            force=force,
        )
    if not keep_work:
        steps.clean()
    return stamp


def main(argv=None):
    parser = argument_parser(__doc__)
    parser.add_argument("--raw-dir", help="the unpacked release: a folder holding org_data/ (or its six files)")
    parser.add_argument("--archive", help=f"the release's archive, under any name (default: DOWNLOAD_DIR/{ARCHIVE})")
    parser.add_argument(
        "--download-dir", default=str(DOWNLOADS), help="where the archive was saved (default: data/downloads)"
    )
    parser.add_argument("--archive-sha256", help="the sha256 of an archive you rebuilt (default: the release's)")
    parser.add_argument(
        "--merges", type=positive, default=MERGES, help=f"joint BPE merges (default: {MERGES}, the paper's)"
    )
    parser.add_argument("--out", default=OUT, help="output directory (default: the repo's data/gigaword)")
    add_common_args(parser)
    args = parser.parse_args(argv)
    if args.raw_dir and (args.archive or args.archive_sha256):
        parser.error("--raw-dir: not with --archive or --archive-sha256 (the files are already unpacked)")
    return run_cli(
        parser,
        prepare,
        args,
        out_dir=args.out,
        raw_dir=args.raw_dir,
        archive=args.archive,
        download_dir=args.download_dir,
        archive_sha256=args.archive_sha256,
        merges=args.merges,
    )


if __name__ == "__main__":
    main()
