"""Multi30k De-En (task 1 of the WMT16-18 multimodal translation tasks; Elliott et al.
2016): 29,000 image-description pairs, small enough that a 2-core CPU trains a
Transformer that translates (the README's main job).

1. the raw, cased, untokenised ``.gz`` files of the official repository
   (``multi30k/dataset``, pinned to one commit and checked against their sha256),
   downloaded into ``DOWNLOAD_DIR/multi30k/`` or read from ``--raw-dir`` (a folder
   holding them, e.g. ``../shared/data/multi30k/task1_raw``);
2. train = ``train`` (29,000), valid = ``val`` (1,014), test = ``test_2016_flickr``
   (1,000; the test set Multi30k papers report; ``--test`` picks another);
3. the WMT pipeline of ``wmt14.py`` with a joint SentencePiece model (8,000 pieces by
   default) on the punctuation-normalised text, or ``--bpe MERGES`` for Moses + BPE;
   train cleaned to 1..250 pieces, ratio 1.5; a joined dictionary
   (``--share-all-embeddings``).

The untokenised references (``test.raw.*``) are what detokenised, cased SacreBLEU
scores against.
"""

import functools
import gzip
import zlib
from pathlib import Path

from fairseq_layernorm_plugins.prepare.cli import (
    DOWNLOADS,
    add_common_args,
    argument_parser,
    in_data,
    positive,
    run_cli,
)
from fairseq_layernorm_plugins.prepare.dataset import evenly_spaced
from fairseq_layernorm_plugins.prepare.fetch import download, verify
from fairseq_layernorm_plugins.prepare.steps import Steps, one_at_a_time
from fairseq_layernorm_plugins.prepare.textio import DataError
from fairseq_layernorm_plugins.prepare.wmt14 import Sources
from fairseq_layernorm_plugins.prepare.wmt14 import prepare as prepare_wmt

COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"  # multi30k/dataset master, 2020-11-09
URL = f"https://raw.githubusercontent.com/multi30k/dataset/{COMMIT}/data/task1/raw/{{name}}"
SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
}
TEST_SETS = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")
SHARED_RAW = Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k" / "task1_raw"


def recipe_name(test="test_2016_flickr", test_lines=None):
    """The ``recipe`` a prepared directory's stamp names: the test set, and its line count if cut."""
    return f"multi30k.{test}" + (f".{test_lines}" if test_lines else "")


def default_raw_dir():
    """../shared/data/multi30k/task1_raw when it exists, else None (download)."""
    return SHARED_RAW if SHARED_RAW.is_dir() else None


def raw_files(names, raw_dir=None, download_dir=DOWNLOADS, url=URL, retries=3, wait=5.0):
    """{name: path} of the verified ``.gz`` files: from ``raw_dir``, or downloaded from
    ``url`` (``{name}`` in it) into ``download_dir/multi30k/`` (kept as a cache)."""
    files = {}
    if raw_dir is not None and not Path(raw_dir).is_dir():
        raise DataError(f"--raw-dir {raw_dir}: no such folder")
    for name in names:
        if raw_dir is not None:
            path = Path(raw_dir) / name
            if not path.is_file():
                raise DataError(f"{path}: file not found (--raw-dir must hold {', '.join(names)})")
            verify(path, SHA256[name])
        else:
            cache = Path(download_dir) / "multi30k"
            path = download(
                url.format(name=name),
                cache / name,
                retries=retries,
                wait=wait,
                checksum=SHA256[name],
                hint=f"pass --raw-dir DIR holding {', '.join(names)}",
            )
        files[name] = path
    return files


def gunzip(files, subsets, out):
    """Decompress each ``NAME.gz`` to ``out/NAME``, keeping ``subsets[NAME]`` evenly
    spaced lines where given; a truncated or corrupt file is a one-line error naming it."""
    for name, path in files.items():
        try:
            with gzip.open(path, "rb") as src:
                lines = src.read().splitlines(keepends=True)
        except (OSError, EOFError, zlib.error) as err:
            raise DataError(f"{path}: corrupt or truncated gzip file ({err})") from None
        (out / name.removesuffix(".gz")).write_bytes(b"".join(evenly_spaced(lines, subsets.get(name))))


@one_at_a_time
def prepare(
    out_dir,
    raw_dir=None,
    download_dir=DOWNLOADS,
    src="de",
    tgt="en",
    test="test_2016_flickr",
    sentencepiece=8000,
    merges=None,
    test_lines=None,
    url=URL,
    **kwargs,
):
    """Build the Multi30k data directory ``out_dir`` (layout of ``dataset.py``);
    ``merges`` set means Moses + BPE instead of SentencePiece; ``test_lines`` keeps that
    many evenly spaced test lines (quick runs). Returns its stamp."""
    if test not in TEST_SETS:
        raise DataError(f"unknown Multi30k test set {test!r} (choose from {', '.join(TEST_SETS)})")
    out_dir = Path(out_dir)
    splits = {"train": "train", "valid": "val", "test": test}
    names = [f"{prefix}.{lang}.gz" for prefix in splits.values() for lang in (src, tgt)]
    files = raw_files(names, raw_dir, download_dir, url)
    steps = Steps(out_dir.with_name(out_dir.name + ".work"), kwargs.get("force", False))
    subsets = {f"{test}.{lang}.gz": test_lines for lang in (src, tgt)} if test_lines else {}
    raw = steps.run("gunzip", functools.partial(gunzip, files, subsets), inputs=list(files.values()), options=subsets)
    sources = Sources(
        **{split: [{lang: raw.path / f"{prefix}.{lang}" for lang in (src, tgt)}] for split, prefix in splits.items()},
        keyed_by=[raw],
    )
    return prepare_wmt(
        out_dir,
        sources,
        src=src,
        tgt=tgt,
        merges=merges or 0,
        sentencepiece=None if merges else sentencepiece,
        recipe=recipe_name(test, test_lines),
        **kwargs,
    )


def main(argv=None):
    parser = argument_parser(__doc__)
    parser.add_argument(
        "--raw-dir",
        default=default_raw_dir(),
        help="folder holding the raw .gz files (default: ../shared/data/multi30k/task1_raw if present, else download)",
    )
    parser.add_argument(
        "--download-dir", default=str(DOWNLOADS), help="download cache (default: the repo's data/downloads)"
    )
    parser.add_argument(
        "--out",
        default=in_data("multi30k.de-en"),
        help="output directory (default: the repo's data/multi30k.de-en, where the multi30k recipes read it)",
    )
    parser.add_argument("--src", default="de", choices=("de", "en"))
    parser.add_argument("--tgt", default="en", choices=("de", "en"))
    parser.add_argument(
        "--test", default="test_2016_flickr", choices=TEST_SETS, help="test set (default: test_2016_flickr)"
    )
    parser.add_argument(
        "--sentencepiece",
        type=positive,
        default=8000,
        metavar="VOCAB",
        help="joint SentencePiece pieces (default: 8000)",
    )
    parser.add_argument(
        "--test-lines", type=positive, default=None, help="keep N evenly spaced test lines (default: all)"
    )
    parser.add_argument(
        "--bpe",
        type=positive,
        default=None,
        metavar="MERGES",
        help="Moses + joint BPE with MERGES merges instead of SentencePiece",
    )
    add_common_args(parser)
    args = parser.parse_args(argv)
    return run_cli(
        parser,
        prepare,
        args,
        out_dir=args.out,
        raw_dir=args.raw_dir,
        download_dir=args.download_dir,
        src=args.src,
        tgt=args.tgt,
        test=args.test,
        sentencepiece=args.sentencepiece,
        merges=args.bpe,
        test_lines=args.test_lines,
    )


if __name__ == "__main__":
    main()
