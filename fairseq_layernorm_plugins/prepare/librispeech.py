"""LibriSpeech speech recognition (``fairseq-ln-prepare librispeech``): Panayotov et al. (2015)'s
read English audiobooks, in the layout fairseq's speech-to-text task reads (as its
``examples/speech_to_text/prep_librispeech_data.py`` writes it), without torchaudio.

1. The archives: ``SPLIT.tar.gz`` of OpenSLR resource 12 for each of ``--splits`` (default:
   the seven official ones), downloaded into ``--download-dir`` (kept as a cache) and checked
   against its published sha256, then unpacked (a member that would land outside the unpacked
   folder is refused); or ``--source DIR``, an unpacked ``LibriSpeech/`` folder
   (``DIR/SPLIT/...``), when nothing is downloaded.
2. Transcripts: each chapter's ``SPEAKER-CHAPTER.trans.txt`` (``SPEAKER/CHAPTER/`` of a split),
   one line ``UTTERANCE-ID TRANSCRIPT`` per ``UTTERANCE-ID.flac`` beside it; a line without its
   recording, or a recording without its line, is an error naming it. The transcripts are
   lower-cased, as fairseq's example writes ``tgt_text``.
3. Features: 80 log mel filter banks per 10 ms (``fbank.py``: Kaldi's, as torchaudio computes
   them for fairseq's example), each utterance's ``(frames, 80)`` float32 array saved as
   ``UTTERANCE-ID.npy`` in one uncompressed zip, ``fbank80.zip``, for every split.
4. Manifests ``SPLIT.tsv``: ``id``, ``audio`` (``fbank80.zip:OFFSET:LENGTH``, where the .npy's
   bytes lie in the zip), ``n_frames``, ``tgt_text``, ``speaker``; utterances in the order of
   their ids (torchaudio's LIBRISPEECH, which fairseq's example reads).
5. Vocabulary: a unigram SentencePiece model of ``--vocab-size`` pieces (default 10,000, the
   example's) learnt on the prepared ``train-*`` splits' transcripts, with fairseq's ids
   (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3), and fairseq's dictionary of its pieces.
6. ``config.yaml`` for ``fairseq-train OUT --task speech_to_text --config-yaml config.yaml``:
   the example's, with its "ld" SpecAugment policy. fairseq reads the manifests' zip relative to
   ``audio_root`` (else the current folder), so ``audio_root`` and the SentencePiece model are
   OUT's absolute paths: training works from any folder, and after moving OUT a rerun with the
   new ``--out`` rewrites ``config.yaml`` (nothing else).

Sizes (utterances; hours from Panayotov et al. 2015, Table 1): train-clean-100 28,539 (100.6 h),
train-clean-360 104,014 (363.6 h), train-other-500 148,688 (496.7 h), dev-clean 2,703 (5.4 h),
dev-other 2,864 (5.3 h), test-clean 2,620 (5.4 h), test-other 2,939 (5.1 h). The archives take
about 60 GB; the features 115 MB an hour of audio (100 frames a second of 80 float32), about
113 GB for the 982 hours, once in ``OUT.work`` and again in ``fbank80.zip`` (steps are
resumable; ``OUT.work`` is removed when the output is complete, unless ``--keep-work``).

Output:

    OUT/fbank80.zip                    UTTERANCE-ID.npy of every split, stored uncompressed
    OUT/SPLIT.tsv                      the manifests
    OUT/spm_unigramN.{model,vocab}     SentencePiece's model and its pieces' scores
    OUT/spm_unigramN.txt               fairseq's dictionary: the pieces but the four specials
    OUT/config.yaml                    fairseq's S2TDataConfig
    OUT/stamp.json                     sizes, frames, options, the key of the inputs, the files

Licence: CC BY 4.0 (LibriSpeech, from LibriVox's public-domain recordings).
"""

import argparse
import functools
import hashlib
import importlib.metadata
import logging
import re
import shutil
import sys
import zipfile
from pathlib import Path

from tqdm import tqdm

from fairseq_layernorm_plugins.prepare import output
from fairseq_layernorm_plugins.prepare.cli import (
    DOWNLOADS,
    add_common_args,
    argument_parser,
    in_data,
    positive,
    run_cli,
)
from fairseq_layernorm_plugins.prepare.dataset import current_stamp
from fairseq_layernorm_plugins.prepare.fbank import NUM_BINS, speech_module
from fairseq_layernorm_plugins.prepare.fetch import download, extract
from fairseq_layernorm_plugins.prepare.output import output_directory, write_stamp
from fairseq_layernorm_plugins.prepare.parallel import imap_ordered
from fairseq_layernorm_plugins.prepare.s2t_layout import (
    COLUMNS,
    FEATURES,
    config_text,
    learn_vocabulary,
    npy_bytes,
    npy_members,
    read_tsv,
    refresh_config,
    stored_member,
    write_tsv,
)
from fairseq_layernorm_plugins.prepare.steps import Steps, one_at_a_time
from fairseq_layernorm_plugins.prepare.textio import DataError, read_lines

logger = logging.getLogger(__name__)

SPLITS = (
    "train-clean-100",
    "train-clean-360",
    "train-other-500",
    "dev-clean",
    "dev-other",
    "test-clean",
    "test-other",
)
BASE_URL = "https://www.openslr.org/resources/12"
SHA256 = {  # of the archives SPLIT.tar.gz, as torchaudio's datasets/librispeech.py checks them (_CHECKSUMS)
    "dev-clean": "76f87d090650617fca0cac8f88b9416e0ebf80350acb97b343a85fa903728ab3",
    "dev-other": "12661c48e8c3fe1de2c1caa4c3e135193bfb1811584f11f569dd12645aa84365",
    "test-clean": "39fde525e59672dc6d1551919b1478f724438a95aa55f874b576be21967e6c23",
    "test-other": "d09c181bba5cf717b3dee7d4d592af11a3ee3a09e08ae025c5506f6ebe961c29",
    "train-clean-100": "d4ddd1d5a6ab303066f14971d768ee43278a5f2a0aa43dc716b0e64ecbbbf6e2",
    "train-clean-360": "146a56496217e96c14334a160df97fffedd6e0a04e66b9c5af0d40be3c792ecf",
    "train-other-500": "ddb22f27f96ec163645d53215559df6aa36515f26e01dd70798188350adcb6d2",
}
VOCAB_SIZE = 10000
UTTERANCE = re.compile(r"(\d+)-(\d+)-(\d+)")  # SPEAKER-CHAPTER-NUMBER
OUT = in_data("librispeech")


def archive_url(split):
    return f"{BASE_URL}/{split}.tar.gz"


def split_list(text):
    """An argparse type: comma-separated split names, returned in the official order."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SPLITS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown split {', '.join(unknown) or repr(text)} (choose from {', '.join(SPLITS)})"
        )
    return [split for split in SPLITS if split in names]


split_list.__name__ = "split list"


def source_split(source, split):
    """The folder of ``split`` in the unpacked corpus ``source`` (``source/SPLIT`` or
    ``source/LibriSpeech/SPLIT``)."""
    source = Path(source)
    if not source.is_dir():
        raise DataError(f"--source {source}: no such folder")
    for folder in (source / split, source / "LibriSpeech" / split):
        if folder.is_dir():
            return folder
    raise DataError(f"--source {source}: no {split}/ in it (nor in its LibriSpeech/)")


def listing(folder):
    """A digest of what ``folder`` holds: every file's path, size and modification time (the key
    of a ``--source`` split: hashing LibriSpeech's 60 GB of FLAC on every run would take minutes)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(folder)}\t{stat.st_size}\t{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def read_transcripts(folder):
    """[(utterance id, speaker, transcript)] of the split folder ``folder``, sorted by id: every
    ``SPEAKER/CHAPTER/SPEAKER-CHAPTER.trans.txt`` line ``UTTERANCE-ID TRANSCRIPT`` with its
    ``UTTERANCE-ID.flac`` beside it, the transcript lower-cased (whitespace runs one space)."""
    folder = Path(folder)
    rows = {}
    for chapter in sorted(p for p in folder.glob("*/*") if p.is_dir()):
        speaker, number = chapter.parent.name, chapter.name
        trans = chapter / f"{speaker}-{number}.trans.txt"
        recordings = {path.stem for path in chapter.glob("*.flac")}
        listed = set()
        for line_number, line in enumerate(read_lines(trans) if trans.is_file() else [], start=1):
            utterance, _, text = line.partition(" ")
            match = UTTERANCE.fullmatch(utterance)
            if not text.strip() or not match or match.group(1, 2) != (speaker, number):
                raise DataError(f"{trans}:{line_number}: not '{speaker}-{number}-NUMBER TRANSCRIPT'")
            if utterance in listed:
                raise DataError(f"{trans}:{line_number}: {utterance} listed a second time")
            if utterance not in recordings:
                raise DataError(f"{chapter / utterance}.flac: not found (listed in {trans}:{line_number})")
            listed.add(utterance)
            rows[utterance] = (speaker, " ".join(text.split()).lower())  # prep_librispeech_data.py: utt.lower()
        unlisted = sorted(recordings - listed)
        if unlisted:
            more = f" (and {len(unlisted) - 1} more)" if len(unlisted) > 1 else ""
            where = f"no line in {trans}" if trans.is_file() else f"no {trans.name} beside it"
            raise DataError(f"{chapter / unlisted[0]}.flac: no transcript ({where}){more}")
    if not rows:
        raise DataError(f"{folder}: no utterances (SPEAKER/CHAPTER/SPEAKER-CHAPTER.trans.txt and .flac files)")
    return [(utterance, *rows[utterance]) for utterance in sorted(rows)]


def write_transcripts(folder, out):
    """The step ``text.SPLIT``: ``out/utterances.tsv`` (id, speaker, tgt_text) of :func:`read_transcripts`."""
    write_tsv(Path(out) / "utterances.tsv", ("id", "speaker", "tgt_text"), read_transcripts(folder))


def unpack(split, download_dir, out):
    """The step ``unpack.SPLIT``: the verified archive (downloaded unless ``download_dir`` holds
    it) unpacked into ``out``, which must then hold ``LibriSpeech/SPLIT/``."""
    archive = download(
        archive_url(split),
        Path(download_dir) / f"{split}.tar.gz",
        checksum=SHA256[split],
        hint="pass --source DIR holding the unpacked LibriSpeech/",
    )
    extract(archive, out, required=())  # tarfile's "data" filter: nothing lands outside ``out``
    if not (Path(out) / "LibriSpeech" / split).is_dir():
        raise DataError(f"{archive}: no LibriSpeech/{split}/ in it")


def extract_features(folder, text_dir, workers, desc, out):
    """The step ``fbank80.SPLIT``: ``out/features.zip``, ``UTTERANCE-ID.npy`` of each utterance of
    ``text_dir/utterances.tsv`` (its recording ``folder/SPEAKER/CHAPTER/UTTERANCE-ID.flac``)."""
    utterances = [row[0] for row in read_tsv(Path(text_dir) / "utterances.tsv")]
    paths = [Path(folder).joinpath(*UTTERANCE.fullmatch(u).group(1, 2), f"{u}.flac") for u in utterances]
    with zipfile.ZipFile(Path(out) / "features.zip", "w", zipfile.ZIP_STORED) as z:
        for utterance, data in zip(
            utterances, imap_ordered(npy_bytes, paths, workers, desc, chunk_size=4, unit=" utt"), strict=True
        ):
            z.writestr(stored_member(f"{utterance}.npy"), data)


def write_output(out_dir, splits, texts, features, vocabulary, spm_prefix, content):
    """Write ``out_dir`` atomically from the finished steps (:func:`prepare`); returns the stamp's content."""
    owner = {}
    for split in splits:
        for utterance, *_ in read_tsv(texts[split] / "utterances.tsv"):
            if utterance in owner:
                raise DataError(f"{utterance}: in {owner[utterance]} and in {split} (one recording, two splits?)")
            owner[utterance] = split
    with output_directory(out_dir) as tmp:
        with zipfile.ZipFile(tmp / FEATURES, "w", zipfile.ZIP_STORED) as z:
            with tqdm(total=len(owner), desc=FEATURES, unit=" utt", file=sys.stderr, mininterval=2) as bar:
                for split in splits:
                    with zipfile.ZipFile(features[split] / "features.zip") as src:
                        for info in src.infolist():
                            z.writestr(stored_member(info.filename), src.read(info))
                            bar.update(1)
        members = npy_members(tmp / FEATURES)
        sizes, frames = {}, {}
        for split in splits:
            rows = []
            for utterance, speaker, text in read_tsv(texts[split] / "utterances.tsv"):
                offset, length, n_frames = members[utterance]
                rows.append((utterance, f"{FEATURES}:{offset}:{length}", n_frames, text, speaker))
            write_tsv(tmp / f"{split}.tsv", COLUMNS, rows)
            sizes[split], frames[split] = len(rows), sum(row[2] for row in rows)
        for suffix in (".model", ".vocab", ".txt"):
            shutil.copy(vocabulary / f"{spm_prefix}{suffix}", tmp)
        (tmp / "config.yaml").write_text(config_text(out_dir, spm_prefix), encoding="utf-8")
        content.update(sizes=sizes, frames=frames)
        write_stamp(tmp, content)
    return content


def fbank_version():
    """The version of kaldi-native-fbank (for the stamp)."""
    speech_module("kaldi_native_fbank")
    return importlib.metadata.version("kaldi-native-fbank")


@one_at_a_time
def prepare(
    out_dir,
    source=None,
    download_dir=DOWNLOADS,
    splits=SPLITS,
    vocab_size=VOCAB_SIZE,
    soft_vocab_limit=False,
    workers=2,
    force=False,
    keep_work=False,
):
    """Build the LibriSpeech data folder ``out_dir`` of ``splits`` from ``source`` (the unpacked
    corpus) or from the archives (downloaded to ``download_dir``); returns its stamp."""
    splits = [split for split in SPLITS if split in splits]
    train = [split for split in splits if split.startswith("train-")]
    if not train:
        raise DataError(f"--splits {','.join(splits)}: no training split (train-*) to learn the vocabulary on")
    out_dir = Path(out_dir)
    steps = Steps(output.work_dir(out_dir), force)
    folders, unpacked, texts = {}, {}, {}  # per split: its recordings' folder, the steps reading it
    for split in splits:
        if source is not None:
            folders[split] = source_split(source, split)
            unpacked[split], options = [], {"listing": listing(folders[split])}
        else:
            step = steps.run(
                f"unpack.{split}", functools.partial(unpack, split, download_dir), options={"sha256": SHA256[split]}
            )
            folders[split] = step.path / "LibriSpeech" / split
            unpacked[split], options = [step], None
        write = functools.partial(write_transcripts, folders[split])
        texts[split] = steps.run(f"text.{split}", write, inputs=unpacked[split], options=options)
    features = {
        split: steps.run(
            f"fbank{NUM_BINS}.{split}",
            functools.partial(extract_features, folders[split], texts[split].path, workers, f"fbank {split}"),
            inputs=[texts[split], *unpacked[split]],
            options={"num_bins": NUM_BINS, "fbank": "torchaudio.compliance.kaldi.fbank's settings"},
        )
        for split in splits
    }
    spm_prefix = f"spm_unigram{vocab_size}"
    vocabulary = steps.run(
        spm_prefix,
        lambda out: learn_vocabulary(
            [text for split in train for _, _, text in read_tsv(texts[split].path / "utterances.tsv")],
            vocab_size,
            not soft_vocab_limit,
            workers,
            out,
        ),
        inputs=[texts[split] for split in train],
        options={"vocab_size": vocab_size, "hard_vocab_limit": not soft_vocab_limit},
    )
    options = {
        "recipe": "librispeech",
        "splits": splits,
        "vocab_size": vocab_size,
        "hard_vocab_limit": not soft_vocab_limit,
        "features": f"{NUM_BINS} log mel filter banks every 10 ms (torchaudio.compliance.kaldi.fbank's, fbank.py)",
    }
    key = Steps.key("dataset", [*texts.values(), *features.values(), vocabulary], [options])
    stamp = None if force else current_stamp(out_dir, key)
    if stamp is not None:
        logger.info("%s: up to date (made from these files with these options), nothing to do", out_dir)
        refresh_config(out_dir, spm_prefix)
    else:
        for split in splits:  # every download, unpacking and transcript check before the long work
            texts[split].ready()
        vocabulary.ready()
        for step in features.values():
            step.ready()
        source_note = f"{source} (unpacked)" if source is not None else f"{BASE_URL}/SPLIT.tar.gz (sha256 checked)"
        content = {"key": key, **options, "source": source_note, "kaldi_native_fbank": fbank_version()}
        stamp = write_output(
            out_dir,
            splits,
            {split: step.path for split, step in texts.items()},
            {split: step.path for split, step in features.items()},
            vocabulary.path,
            spm_prefix,
            content,
        )
    if not keep_work:
        steps.clean()
    return stamp


def main(argv=None):
    parser = argument_parser(__doc__)
    parser.add_argument(
        "--source",
        metavar="DIR",
        help="an unpacked LibriSpeech/ folder (holding SPLIT/SPEAKER/CHAPTER/...); nothing is downloaded",
    )
    parser.add_argument(
        "--download-dir",
        default=str(DOWNLOADS),
        metavar="DIR",
        help="where the archives SPLIT.tar.gz are downloaded and kept (default: the repo's data/downloads)",
    )
    parser.add_argument(
        "--splits",
        type=split_list,
        default=list(SPLITS),
        metavar="SPLIT,...",
        help=f"the splits to prepare, a train-* among them, of {', '.join(SPLITS)} (default: all seven)",
    )
    parser.add_argument(
        "--vocab-size",
        type=positive,
        default=VOCAB_SIZE,
        metavar="N",
        help=f"SentencePiece unigram pieces, fairseq's four specials among them (default: {VOCAB_SIZE})",
    )
    parser.add_argument(
        "--soft-vocab-limit",
        action="store_true",
        help="let SentencePiece build fewer pieces than --vocab-size when the transcripts hold too few "
        "(its hard_vocab_limit=false; default: an error)",
    )
    parser.add_argument("--out", default=OUT, help="output directory (default: the repo's data/librispeech)")
    add_common_args(parser, subsample=False, workers="processes for feature extraction")
    args = parser.parse_args(argv)
    return run_cli(
        parser,
        prepare,
        args,
        out_dir=args.out,
        source=args.source,
        download_dir=args.download_dir,
        splits=args.splits,
        vocab_size=args.vocab_size,
        soft_vocab_limit=args.soft_vocab_limit,
    )


if __name__ == "__main__":
    main()
