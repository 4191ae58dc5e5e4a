"""fairseq's speech-to-text data layout (what its ``speech_to_text`` task reads, as its
``examples/speech_to_text`` scripts write it), for any corpus of recordings and transcripts:

- one uncompressed zip of ``UTTERANCE-ID.npy`` filter banks, each ``(frames, 80)`` float32
  (:func:`npy_bytes`, :func:`stored_member`), whose members' byte offsets the manifests name
  (:func:`npy_members`);
- manifests ``SPLIT.tsv`` (:data:`COLUMNS`, written unquoted as fairseq's ``save_df_to_tsv``);
- a unigram SentencePiece vocabulary with fairseq's ids and its dictionary
  (:func:`learn_vocabulary`);
- ``config.yaml`` (:func:`config_text`): the vocabulary, the features' shape, utterance CMVN and
  the "ld" SpecAugment policy.
"""

import csv
import io
import logging
import re
import zipfile
from pathlib import Path

import numpy as np
import yaml

from fairseq_layernorm_plugins.atomic import write_text
from fairseq_layernorm_plugins.prepare.fbank import NUM_BINS, fbank, read_audio, speech_module
from fairseq_layernorm_plugins.prepare.textio import DataError, write_lines

logger = logging.getLogger(__name__)

FEATURES = f"fbank{NUM_BINS}.zip"
COLUMNS = ("id", "audio", "n_frames", "tgt_text", "speaker")  # fairseq's SpeechToTextDatasetCreator
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # ids 0-3, as in fairseq's Dictionary
# SpecAugment's "ld" policy (Park et al. 2019's LibriSpeech double, without time warping), as
# data_utils.py's S2TDataConfigWriter.set_specaugment_ld_policy writes it
SPECAUGMENT_LD = {
    "freq_mask_F": 27,
    "freq_mask_N": 2,
    "time_mask_N": 2,
    "time_mask_T": 100,
    "time_mask_p": 1.0,
    "time_wrap_W": 0,
}
# the feature transforms of each split; fairseq 0.12.3's S2TDataConfig.get_feature_transforms
# reads "feature_transforms" (the older "transforms" only through a conversion it warns about)
FEATURE_TRANSFORMS = {"*": ["utterance_cmvn"], "_train": ["utterance_cmvn", "specaugment"]}
NPY_MAGIC = b"\x93NUMPY"  # fairseq's is_npy_data checks its first two bytes (147, 78)


def write_tsv(path, header, rows):
    """A tab-separated file as fairseq's ``save_df_to_tsv`` writes one (no quoting)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\", lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def read_tsv(path):
    """The rows (lists of fields) of a file :func:`write_tsv` wrote, without its header."""
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\"))[1:]


def npy_bytes(path):
    """The features of the recording ``path``, ``(frames, 80)`` float32, as a .npy file's bytes."""
    waveform, sample_rate = read_audio(path)
    buffer = io.BytesIO()
    np.save(buffer, fbank(waveform, sample_rate), allow_pickle=False)
    return buffer.getvalue()


def stored_member(name):
    """A zip member ``name`` stored uncompressed, dated 1980-01-01 (the same bytes on every run)."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    info.external_attr = 0o644 << 16
    return info


def learn_vocabulary(texts, vocab_size, hard_vocab_limit, workers, out):
    """The step ``spm_unigramN``: SentencePiece's unigram model of ``vocab_size`` pieces on
    ``texts`` with fairseq's ids (``out/spm_unigramN.{model,vocab}``, data_utils.py's gen_vocab
    options) and fairseq's dictionary of its pieces but the specials, in id order, each with the
    count 1 (``out/spm_unigramN.txt``)."""
    spm = speech_module("sentencepiece")
    prefix = Path(out) / f"spm_unigram{vocab_size}"
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_prefix=str(prefix),
            model_type="unigram",
            vocab_size=vocab_size,
            character_coverage=1.0,
            **{f"{name}_id": i for name, i in (("bos", 0), ("pad", 1), ("eos", 2), ("unk", 3))},
            hard_vocab_limit=hard_vocab_limit,
            num_threads=workers,
            minloglevel=1,
        )
    except RuntimeError as err:
        largest = re.search(r"value <= (\d+)", str(err))
        if largest:
            raise DataError(
                f"--vocab-size {vocab_size}: more pieces than SentencePiece finds in the training transcripts "
                f"(at most {largest.group(1)}); choose a smaller one, or pass --soft-vocab-limit"
            ) from None
        smallest = re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(err))
        if smallest:
            raise DataError(
                f"--vocab-size {vocab_size}: fewer pieces than the training transcripts' characters and "
                f"fairseq's 4 specials (at least {smallest.group(1)})"
            ) from None
        raise DataError(f"--vocab-size {vocab_size}: SentencePiece refused it ({' '.join(str(err).split())})") from None
    model = spm.SentencePieceProcessor(model_file=f"{prefix}.model")
    pieces = [model.id_to_piece(i) for i in range(model.get_piece_size())]
    if tuple(pieces[: len(SPECIALS)]) != SPECIALS:
        raise RuntimeError(f"{prefix}.model: ids 0-3 are {pieces[:4]}, not fairseq's {list(SPECIALS)}")
    write_lines(f"{prefix}.txt", [f"{piece} 1" for piece in pieces[len(SPECIALS) :]])


def npy_members(zip_path):
    """{utterance id: (byte offset, byte length, frames)} of the stored ``.npy`` members of
    ``zip_path``, read where fairseq's manifests point (each checked to be a float32
    ``(frames, 80)`` array there)."""
    with zipfile.ZipFile(zip_path) as z:
        infos = z.infolist()
    members = {}
    with open(zip_path, "rb") as f:
        for info in infos:
            # a member's data follows its 30-byte local header and its name (data_utils.get_zip_manifest)
            offset = info.header_offset + 30 + len(info.filename)
            f.seek(offset)
            if info.compress_type != zipfile.ZIP_STORED or f.read(len(NPY_MAGIC)) != NPY_MAGIC:
                raise RuntimeError(f"{zip_path}: {info.filename} is not an uncompressed .npy at byte {offset}")
            f.seek(offset)
            version = np.lib.format.read_magic(f)
            read_header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read_header(f)
            if len(shape) != 2 or shape[1] != NUM_BINS or dtype != np.float32:
                raise RuntimeError(
                    f"{zip_path}: {info.filename} holds {dtype} {shape}, not float32 (frames, {NUM_BINS})"
                )
            members[info.filename.removesuffix(".npy")] = (offset, info.file_size, shape[0])
    return members


def config_text(out_dir, spm_prefix):
    """``config.yaml`` (fairseq's S2TDataConfig) for the data folder ``out_dir``."""
    config = {
        "audio_root": str(out_dir),  # the manifests' zip is read relative to it (else the current folder)
        "bpe_tokenizer": {"bpe": "sentencepiece", "sentencepiece_model": str(Path(out_dir) / f"{spm_prefix}.model")},
        "feature_transforms": FEATURE_TRANSFORMS,
        "input_channels": 1,
        "input_feat_per_channel": NUM_BINS,
        "specaugment": SPECAUGMENT_LD,
        "vocab_filename": f"{spm_prefix}.txt",
    }
    return yaml.safe_dump(config, default_flow_style=False)


def refresh_config(out_dir, spm_prefix):
    """Rewrite ``out_dir/config.yaml`` if it names another folder (``out_dir`` was moved)."""
    path, text = Path(out_dir) / "config.yaml", config_text(out_dir, spm_prefix)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        logger.info("%s: written for another folder (moved?); rewritten for %s", path, out_dir)
        write_text(path, text)
