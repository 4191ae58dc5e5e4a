"""``fairseq-ln-prepare librispeech`` (prepare/librispeech.py, prepare/fbank.py) on real recordings
in LibriSpeech's own layout (tests/helpers/librispeech_fixture.py: pocketsphinx-testdata's LibriVox
sentences and spoken cards): the features against Kaldi's fbank written here in numpy, the
manifests through fairseq's own readers and the zip format, the vocabulary against fairseq's
``gen_vocab``, ``config.yaml`` against fairseq's ``gen_config_yaml`` and through a 2-update
``fairseq-train`` from another folder, stamps and ``--force``, the archive path (file:// downloads,
checksums, unpacking), and one-line errors that leave no output."""

import hashlib
import importlib.util
import io
import json
import re
import shutil
import socket
import sys
import tarfile
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import error_line, json_records, run_cli
from helpers.cli_in_process import run_console_script
from helpers.librispeech_fixture import SPLIT_OF, build_librispeech_fixture, utterances

from fairseq_layernorm_plugins.prepare import librispeech, s2t_layout
from fairseq_layernorm_plugins.prepare.fbank import fbank, read_audio

SPLITS = ("train-clean-100", "dev-clean", "test-clean")
VOCAB = 40  # the six training transcripts hold more pieces (test_arguments)
COLUMNS = ["id", "audio", "n_frames", "tgt_text", "speaker"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The real recordings as an unpacked ``LibriSpeech/`` (skipped without pocketsphinx-testdata)."""
    return build_librispeech_fixture(tmp_path_factory.mktemp("librispeech-source"))


def prepare(*args):
    """(exit status, stdout, stderr) of ``fairseq-ln-prepare librispeech ARGS`` (the console
    script's entry point, in this process)."""
    return run_console_script("fairseq-ln-prepare", "librispeech", *args)


def prepare_ok(*args):
    code, out, err = prepare(*args)
    assert code == 0, err[-3000:]
    return out, err


def source_args(corpus, out, *more):
    return ["--source", corpus, "--splits", ",".join(SPLITS), "--vocab-size", VOCAB, "--out", out, *more]


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory):
    """The three splits prepared once from ``--source``: (OUT, the command's stdout)."""
    out = tmp_path_factory.mktemp("prepared") / "librispeech"
    stdout, _ = prepare_ok(*source_args(corpus, out, "--workers", 2))
    return out, stdout


@pytest.fixture(scope="module")
def fairseq_data_utils():
    """fairseq's own ``examples/speech_to_text/data_utils.py`` (get_zip_manifest, gen_vocab,
    gen_config_yaml) from the installed fairseq; pandas, which only its TSV helpers use, stands
    in as an empty module where it is not installed."""
    import fairseq

    path = Path(fairseq.__file__).parent / "examples" / "speech_to_text" / "data_utils.py"
    if not path.is_file():
        pytest.skip(f"{path}: not in this fairseq")
    spec = importlib.util.spec_from_file_location("fairseq_s2t_data_utils", path)
    module = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as mp:
        if importlib.util.find_spec("pandas") is None:
            pandas = types.ModuleType("pandas")
            pandas.DataFrame = type("DataFrame", (), {})  # named in annotations only
            mp.setitem(sys.modules, "pandas", pandas)
        spec.loader.exec_module(module)
    return module


def read_manifest(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines[0].split("\t"), [dict(zip(COLUMNS, line.split("\t"))) for line in lines[1:]]


def kaldi_fbank(waveform, sample_rate=16000, num_bins=80):
    """Kaldi's ``compute-fbank-feats`` defaults without dither (torchaudio.compliance.kaldi.fbank's),
    written here from Kaldi's feature-window.cc and mel-computations.cc in float64: 25 ms frames every
    10 ms that fit whole, DC offset removed, pre-emphasis 0.97 (the frame's first sample against
    itself), Povey window, power spectrum of a 512-point FFT, triangular filters evenly spaced on the
    mel scale 1127 ln(1 + f / 700) between 20 Hz and Nyquist, natural log floored at float32's eps."""
    x = np.asarray(waveform, dtype=np.float64) * 2**15  # 16-bit samples
    length, shift, n_fft = sample_rate * 25 // 1000, sample_rate * 10 // 1000, 512
    frames = np.stack([x[i * shift : i * shift + length] for i in range(1 + (len(x) - length) // shift)])
    frames = frames - frames.mean(axis=1, keepdims=True)
    frames = frames - 0.97 * np.concatenate([frames[:, :1], frames[:, :-1]], axis=1)
    n = np.arange(length)
    frames = frames * (0.5 - 0.5 * np.cos(2 * np.pi * n / (length - 1))) ** 0.85
    power = np.abs(np.fft.rfft(frames, n=n_fft, axis=1)) ** 2  # (frames, 257)

    def mel(f):
        return 1127.0 * np.log(1.0 + f / 700.0)

    low, high = mel(20.0), mel(sample_rate / 2)
    step = (high - low) / (num_bins + 1)
    fft_mel = mel(np.arange(n_fft // 2) * sample_rate / n_fft)  # Kaldi leaves out the Nyquist bin
    weights = np.zeros((num_bins, n_fft // 2 + 1))
    for b in range(num_bins):
        left, centre, right = low + b * step, low + (b + 1) * step, low + (b + 2) * step
        rising, falling = (fft_mel - left) / (centre - left), (right - fft_mel) / (right - centre)
        weights[b, : n_fft // 2] = np.where((fft_mel > left) & (fft_mel < right), np.minimum(rising, falling), 0.0)
    return np.log(np.maximum(power @ weights.T, np.finfo(np.float32).eps))


def test_features_are_kaldis_fbank_written_here(prepared, corpus):
    """Each stored feature matrix is fbank.fbank of its FLAC, bit for bit, and within 1e-3 (natural
    log energies of about 1 to 20: float32 against float64) of Kaldi's fbank computed here."""
    from fairseq.data.audio.audio_utils import get_features_or_waveform

    out, _ = prepared
    for u in utterances():
        speaker, chapter, _ = u.id.split("-")
        waveform, rate = read_audio(corpus / u.split / speaker / chapter / f"{u.id}.flac")
        row = next(r for r in read_manifest(out / f"{u.split}.tsv")[1] if r["id"] == u.id)
        stored = get_features_or_waveform(str(out / row["audio"]))
        assert stored.dtype == np.float32 and stored.shape == (1 + (len(waveform) - 400) // 160, 80)
        assert np.array_equal(stored, fbank(waveform, rate))
        assert np.abs(stored - kaldi_fbank(waveform)).max() < 1e-3, u.id


def test_the_manifests_point_fairseq_at_each_utterances_features(prepared, corpus, fairseq_data_utils):
    out, stdout = prepared
    assert stdout.strip().splitlines()[-1] == (
        f"{out}: train-clean-100 6, dev-clean 1, test-clean 3; train on it: fairseq-ln-train RECIPE --data {out}"
    )
    stamp = json.loads((out / "stamp.json").read_text())
    assert stamp["sizes"] == {"train-clean-100": 6, "dev-clean": 1, "test-clean": 3} and stamp["vocab_size"] == VOCAB
    assert stamp["files"] == sorted(
        ["config.yaml", "fbank80.zip", "stamp.json", *(f"{s}.tsv" for s in SPLITS)]
        + [f"spm_unigram{VOCAB}.{suffix}" for suffix in ("model", "txt", "vocab")]
    )
    expected = {u.id: u for u in utterances()}
    with zipfile.ZipFile(out / "fbank80.zip") as z:
        infos = {info.filename: info for info in z.infolist()}
    assert sorted(infos) == sorted(f"{u}.npy" for u in expected)
    assert {info.compress_type for info in infos.values()} == {zipfile.ZIP_STORED}
    paths, lengths = fairseq_data_utils.get_zip_manifest(Path("fbank80.zip"), zip_root=out)
    raw = (out / "fbank80.zip").read_bytes()
    seen = []
    for split in SPLITS:
        header, rows = read_manifest(out / f"{split}.tsv")
        assert header == COLUMNS
        assert [r["id"] for r in rows] == sorted(u for u, s in SPLIT_OF.items() if s == split)
        for r in rows:
            u = expected[r["id"]]
            assert (r["tgt_text"], r["speaker"]) == (u.transcript.lower(), u.speaker)
            assert r["audio"] == paths[u.id] and int(r["n_frames"]) == lengths[u.id]  # fairseq's get_zip_manifest
            name, offset, length = r["audio"].split(":")
            offset, length = int(offset), int(length)
            local = infos[f"{u.id}.npy"].header_offset  # the zip's local file header (APPNOTE 4.3.7)
            assert raw[local : local + 4] == b"PK\x03\x04"
            name_length, extra_length = (int.from_bytes(raw[local + i : local + i + 2], "little") for i in (26, 28))
            assert (name, offset, length) == (
                "fbank80.zip",
                local + 30 + name_length + extra_length,
                infos[f"{u.id}.npy"].file_size,
            )
            assert raw[offset : offset + 2] == bytes([147, 78])  # fairseq's is_npy_data
            samples = len(read_audio(corpus / split / u.speaker / u.id.split("-")[1] / f"{u.id}.flac")[0])
            assert int(r["n_frames"]) == 1 + (samples - 400) // 160
            seen.append(u.id)
        assert stamp["frames"][split] == sum(int(r["n_frames"]) for r in rows)
    assert sorted(seen) == sorted(expected)  # every utterance once


def test_the_vocabulary_is_fairseqs_gen_vocab(prepared, fairseq_data_utils, tmp_path, monkeypatch):
    """spm_unigram40.{model,vocab,txt} as fairseq's gen_vocab writes them from the training
    transcripts; fairseq's Dictionary of the .txt gives each piece SentencePiece's id."""
    import sentencepiece as spm
    from fairseq.data import Dictionary

    out, _ = prepared
    model = spm.SentencePieceProcessor(model_file=str(out / f"spm_unigram{VOCAB}.model"))
    pieces = [model.id_to_piece(i) for i in range(model.get_piece_size())]
    assert len(pieces) == VOCAB and pieces[:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    lines = (out / f"spm_unigram{VOCAB}.txt").read_text(encoding="utf-8").splitlines()
    assert lines == [f"{piece} 1" for piece in pieces[4:]]
    assert [line.split("\t")[0] for line in (out / f"spm_unigram{VOCAB}.vocab").read_text().splitlines()] == pieces
    dictionary = Dictionary.load(str(out / f"spm_unigram{VOCAB}.txt"))
    assert len(dictionary) == VOCAB and all(dictionary.index(p) == i for i, p in enumerate(pieces))

    train = [r["tgt_text"] for r in read_manifest(out / "train-clean-100.tsv")[1]]
    text = tmp_path / "train.txt"
    text.write_text("".join(line + "\n" for line in train), encoding="utf-8")
    monkeypatch.setattr(fairseq_data_utils, "cpu_count", lambda: 2)  # its threads: the command's --workers 2
    fairseq_data_utils.gen_vocab(text, tmp_path / f"spm_unigram{VOCAB}", "unigram", VOCAB)
    assert (tmp_path / f"spm_unigram{VOCAB}.txt").read_text() == "\n".join(lines) + "\n"
    theirs = spm.SentencePieceProcessor(model_file=str(tmp_path / f"spm_unigram{VOCAB}.model"))
    assert [theirs.id_to_piece(i) for i in range(theirs.get_piece_size())] == pieces
    assert all(model.encode(t, out_type=str) == theirs.encode(t, out_type=str) for t in train)


def test_config_yaml_is_the_examples_and_fairseq_trains_on_it_from_another_folder(
    prepared, fairseq_data_utils, tmp_path, monkeypatch
):
    """config.yaml read by fairseq's S2TDataConfig says what the one fairseq's gen_config_yaml
    writes for the LibriSpeech example ("ld" SpecAugment) says, with audio_root OUT; then
    ``fairseq-train OUT --config-yaml config.yaml`` from another folder: 2 updates, validation."""
    from fairseq.data.audio.data_cfg import S2TDataConfig

    out, _ = prepared
    ours = S2TDataConfig(out / "config.yaml")
    (tmp_path / "theirs").mkdir()
    shutil.copy(out / f"spm_unigram{VOCAB}.model", tmp_path / "theirs")
    fairseq_data_utils.gen_config_yaml(
        tmp_path / "theirs", spm_filename=f"spm_unigram{VOCAB}.model", specaugment_policy="ld"
    )
    theirs = S2TDataConfig(tmp_path / "theirs" / "config.yaml")
    assert ours.vocab_filename == theirs.vocab_filename == f"spm_unigram{VOCAB}.txt"
    assert (out / ours.vocab_filename).is_file()
    assert ours.bpe_tokenizer == {"bpe": "sentencepiece", "sentencepiece_model": str(out / f"spm_unigram{VOCAB}.model")}
    assert Path(ours.bpe_tokenizer["sentencepiece_model"]).is_file()
    assert theirs.bpe_tokenizer["bpe"] == "sentencepiece"
    assert (
        (ours.input_channels, ours.input_feat_per_channel)
        == (theirs.input_channels, theirs.input_feat_per_channel)
        == (1, 80)
    )
    assert ours.config["specaugment"] == theirs.config["specaugment"] == s2t_layout.SPECAUGMENT_LD
    for split, is_train in (("train-clean-100", True), ("dev-clean", False), ("test-clean", False)):
        transforms = ours.get_feature_transforms(split, is_train)["feature_transforms"]
        assert transforms == theirs.get_feature_transforms(split, is_train)["feature_transforms"]
        assert transforms == (["utterance_cmvn", "specaugment"] if is_train else ["utterance_cmvn"])
    assert ours.audio_root == str(out) and theirs.audio_root == ""  # fairseq's manifests hold absolute paths

    monkeypatch.chdir(tmp_path)  # not OUT: the zip and the SentencePiece model are found all the same
    log = run_cli(
        "fairseq-train",
        out,
        *("--task", "speech_to_text", "--config-yaml", "config.yaml", "--arch", "s2t_transformer_s"),
        *("--train-subset", "train-clean-100", "--valid-subset", "dev-clean,test-clean"),
        *("--encoder-layers", "2", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32"),
        *("--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--conv-channels", "32"),
        *("--encoder-attention-heads", "2", "--decoder-attention-heads", "2"),
        *("--criterion", "label_smoothed_cross_entropy", "--optimizer", "adam", "--lr", "1e-3"),
        *("--max-tokens", "4000", "--max-update", "2", "--required-batch-size-multiple", "1"),
        *("--cpu", "--no-save", "--log-format", "json", "--log-interval", "1", "--save-dir", tmp_path / "ckpt"),
        in_process=True,
    )
    assert [r["num_updates"] for r in json_records(log, "train_inner")] == ["1", "2"]
    assert "'train-clean-100' has 0.00% OOV" in log
    for subset in ("dev-clean", "test-clean"):  # fairseq tags each validation subset's record with its name
        assert [float(r[f"{subset}_loss"]) > 0 for r in json_records(log, subset)] == [True], subset


def test_a_rerun_does_nothing_force_redoes_and_a_moved_folder_gets_its_config(corpus, tmp_path):
    out = tmp_path / "ls"
    prepare_ok(*source_args(corpus, out, "--workers", 1, "--keep-work"))
    steps = [f"{step}.{split}" for step in ("fbank80", "text") for split in SPLITS] + [f"spm_unigram{VOCAB}"]
    assert sorted(p.name for p in (tmp_path / "ls.work").iterdir()) == sorted(steps)
    features = (out / "fbank80.zip").read_bytes()
    stamp = (out / "stamp.json").stat().st_mtime_ns
    _, err = prepare_ok(*source_args(corpus, out))
    assert "up to date (made from these files with these options), nothing to do" in err
    assert (out / "stamp.json").stat().st_mtime_ns == stamp
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ls"]  # OUT.work cleaned, no OUT.lock

    _, err = prepare_ok(*source_args(corpus, out, "--force"))
    assert "nothing to do" not in err and "fbank80.train-clean-100: done" in err
    assert (out / "stamp.json").stat().st_mtime_ns != stamp
    assert (out / "fbank80.zip").read_bytes() == features  # the same bytes: nothing in the zip depends on the run

    moved = tmp_path / "moved"
    out.rename(moved)
    _, err = prepare_ok(*source_args(corpus, moved))
    assert "nothing to do" in err and "rewritten for" in err
    assert f"audio_root: {moved}\n" in (moved / "config.yaml").read_text()
    assert (moved / "fbank80.zip").read_bytes() == features


def test_a_recording_changed_after_preparing_is_prepared_again(corpus, tmp_path):
    """The stamp of a --source preparation covers every recording: a FLAC rewritten since makes
    the rerun compute its features again (with the work kept, only that split's)."""
    import shutil

    import soundfile

    source = tmp_path / "LibriSpeech"
    shutil.copytree(corpus, source)
    out = tmp_path / "ls"
    prepare_ok(*source_args(source, out, "--workers", 1, "--keep-work"))
    flac = next((source / "test-clean").rglob("*.flac"))
    samples, rate = soundfile.read(flac, dtype="int16")
    soundfile.write(flac, samples[: len(samples) // 2], rate, format="FLAC", subtype="PCM_16")
    _, err = prepare_ok(*source_args(source, out, "--workers", 1, "--keep-work"))
    assert "nothing to do" not in err and "fbank80.test-clean: done" in err and "fbank80.dev-clean: done" not in err
    rows = {row["id"]: row for row in read_manifest(out / "test-clean.tsv")[1]}
    assert int(rows[flac.stem]["n_frames"]) == 1 + (len(samples) // 2 - 400) // 160


def test_an_out_holding_other_files_is_refused(corpus, tmp_path):
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "notes.txt").write_text("x\n")
    for force in ([], ["--force"]):
        code, _, err = prepare(*source_args(corpus, mine, *force))
        assert code == 2
        assert error_line(err) == (
            f"error: {mine}: exists and holds files this command did not write (notes.txt, sub/); "
            "choose another --out or empty it"
        )
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt", "sub"] and not list((mine / "sub").iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def _truncated_flac(root):
    flac = root / "train-clean-100" / "1001" / "100" / "1001-100-0920.flac"
    flac.write_bytes(flac.read_bytes()[: flac.stat().st_size // 2])
    return rf"^error: {flac}: unreadable audio \(.*\)$"


def _listed_without_flac(root):
    flac = root / "test-clean" / "1002" / "200" / "1002-200-0004.flac"
    flac.unlink()
    return rf"^error: {flac}: not found \(listed in {root / 'test-clean' / '1002' / '200' / '1002-200.trans.txt'}:2\)$"


def _empty_transcript_file(root):
    trans = root / "dev-clean" / "1001" / "100" / "1001-100.trans.txt"
    trans.write_text("")  # the chapter's one line gone
    return rf"^error: {trans}: empty or all-blank file$"


def _flac_without_its_line(root):
    trans = root / "test-clean" / "1002" / "200" / "1002-200.trans.txt"
    lines = trans.read_text().splitlines(keepends=True)
    assert lines[0].startswith("1002-200-0003 ")
    trans.write_text("".join(lines[1:]))
    flac = trans.parent / "1002-200-0003.flac"
    return rf"^error: {flac}: no transcript \(no line in {trans}\)$"


def _malformed_line(root):
    trans = root / "train-clean-100" / "1002" / "200" / "1002-200.trans.txt"
    lines = trans.read_text().splitlines(keepends=True)
    lines[1] = "1002-201-0002 FOUR QUEEN OF CLUBS\n"  # another chapter's id
    trans.write_text("".join(lines))
    return rf"^error: {trans}:2: not '1002-200-NUMBER TRANSCRIPT'$"


@pytest.mark.parametrize(
    "damage", [_truncated_flac, _listed_without_flac, _empty_transcript_file, _flac_without_its_line, _malformed_line]
)
def test_bad_recordings_or_transcripts_are_one_line_and_leave_no_out(damage, corpus, tmp_path):
    source = tmp_path / "LibriSpeech"
    shutil.copytree(corpus, source)
    expected = damage(source)
    out = tmp_path / "data" / "ls"
    code, _, err = prepare(*source_args(source, out, "--workers", 2))
    assert code == 2
    line = error_line(err)
    assert re.search(expected, line), line
    assert not out.exists() and not out.with_name("ls.lock").exists()


def closed_port_url():
    """A base URL on a loopback port that nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def make_archive(corpus, split, path, extra=None):
    """``SPLIT.tar.gz`` as OpenSLR packs it (``LibriSpeech/SPLIT/...``); ``extra``: (name, bytes) added."""
    with tarfile.open(path, "w:gz") as tar:
        tar.add(corpus / split, arcname=f"LibriSpeech/{split}")
        if extra is not None:
            info = tarfile.TarInfo(extra[0])
            info.size = len(extra[1])
            tar.addfile(info, io.BytesIO(extra[1]))
    return path


def test_archives_are_downloaded_checked_unpacked_and_a_rerun_needs_none(prepared, corpus, tmp_path, monkeypatch):
    """The archive path (OpenSLR's URLs pointed at a local folder through file://, its sha256 those
    of archives made here) gives the --source output byte for byte; the archives stay in
    --download-dir, and an up-to-date output needs neither them nor the network."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for split in SPLITS:
        archive = make_archive(corpus, split, mirror / f"{split}.tar.gz")
        monkeypatch.setitem(librispeech.SHA256, split, hashlib.sha256(archive.read_bytes()).hexdigest())
    monkeypatch.setattr(librispeech, "BASE_URL", mirror.as_uri())
    downloads, out = tmp_path / "downloads", tmp_path / "data" / "librispeech"
    args = ["--splits", ",".join(SPLITS), "--vocab-size", VOCAB, "--download-dir", downloads, "--out", out]
    prepare_ok(*args)
    assert sorted(p.name for p in downloads.iterdir()) == sorted(f"{s}.tar.gz" for s in SPLITS)
    assert (downloads / "dev-clean.tar.gz").read_bytes() == (mirror / "dev-clean.tar.gz").read_bytes()
    source_out, _ = prepared
    for name in ("fbank80.zip", *(f"{s}.tsv" for s in SPLITS), f"spm_unigram{VOCAB}.txt"):
        assert (out / name).read_bytes() == (source_out / name).read_bytes(), name
    assert sorted(p.name for p in out.parent.iterdir()) == ["librispeech"]

    shutil.rmtree(downloads)
    monkeypatch.setattr(librispeech, "BASE_URL", closed_port_url())
    _, err = prepare_ok(*args)
    assert "nothing to do" in err and not downloads.exists()


def test_bad_archives_are_one_line_errors(corpus, tmp_path, monkeypatch):
    downloads, out = tmp_path / "downloads", tmp_path / "data" / "ls"
    args = ["--splits", "train-clean-100", "--vocab-size", 30, "--download-dir", downloads, "--out", out]
    downloads.mkdir()
    fake = make_archive(corpus, "train-clean-100", downloads / "train-clean-100.tar.gz")
    digest = hashlib.sha256(fake.read_bytes()).hexdigest()
    code, _, err = prepare(*args)  # under the official name, but not the official archive
    assert code == 2 and error_line(err) == (
        f"error: {fake}: sha256 {digest} is not the expected {librispeech.SHA256['train-clean-100']} "
        "(corrupt or another version)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["downloads"]

    make_archive(corpus, "train-clean-100", fake, extra=("../outside.txt", b"escaped\n"))
    monkeypatch.setitem(librispeech.SHA256, "train-clean-100", hashlib.sha256(fake.read_bytes()).hexdigest())
    code, _, err = prepare(*args)
    assert code == 2 and error_line(err).startswith(f"error: {fake}: corrupt or truncated archive (")
    assert "outside" in error_line(err) and not (tmp_path / "data" / "outside.txt").exists()
    assert not out.exists()

    with tarfile.open(fake, "w:gz") as tar:
        tar.add(corpus / "dev-clean", arcname="LibriSpeech/dev-clean")  # another split's archive
    monkeypatch.setitem(librispeech.SHA256, "train-clean-100", hashlib.sha256(fake.read_bytes()).hexdigest())
    code, _, err = prepare(*args)
    assert code == 2 and error_line(err) == f"error: {fake}: no LibriSpeech/train-clean-100/ in it"
    assert not out.exists()


def test_arguments(corpus, tmp_path, capsys):
    out = tmp_path / "ls"
    code, _, err = prepare("--source", corpus, "--splits", "dev-clean,test-clean", "--out", out)
    assert code == 2 and error_line(err) == (
        "error: --splits dev-clean,test-clean: no training split (train-*) to learn the vocabulary on"
    )
    code, _, err = prepare("--source", corpus, "--splits", "train-clean-100,dev-cleen", "--out", out)
    assert code == 2 and error_line(err).startswith("error: argument --splits: unknown split dev-cleen (choose from ")
    code, _, err = prepare("--source", tmp_path / "nowhere", "--splits", "train-clean-100", "--out", out)
    assert code == 2 and error_line(err) == f"error: --source {tmp_path / 'nowhere'}: no such folder"
    code, _, err = prepare("--source", corpus, "--splits", "train-clean-100,dev-other", "--out", out)
    assert code == 2 and error_line(err) == f"error: --source {corpus}: no dev-other/ in it (nor in its LibriSpeech/)"

    args = ["--source", corpus, "--splits", ",".join(SPLITS), "--vocab-size", 1000, "--out", out]
    code, _, err = prepare(*args)
    assert code == 2
    largest = re.fullmatch(
        r"error: --vocab-size 1000: more pieces than SentencePiece finds in the training transcripts "
        r"\(at most (\d+)\); choose a smaller one, or pass --soft-vocab-limit",
        error_line(err),
    )
    assert largest and VOCAB < int(largest.group(1)) < 1000
    assert not out.exists()
    code, _, err = prepare(*args[:-4], "--vocab-size", 5, "--out", out)
    assert code == 2 and re.fullmatch(
        r"error: --vocab-size 5: fewer pieces than the training transcripts' characters and fairseq's 4 specials "
        r"\(at least \d+\)",
        error_line(err),
    )
    prepare_ok(*args, "--soft-vocab-limit")
    pieces = (out / "spm_unigram1000.txt").read_text().splitlines()
    assert (
        VOCAB < 4 + len(pieces) <= int(largest.group(1)) and "spm_unigram1000.txt" in (out / "config.yaml").read_text()
    )

    code, stdout, _ = prepare("--help")
    assert code == 0 and stdout.startswith("usage: fairseq-ln-prepare librispeech")
    for option in (
        "--out",
        "--download-dir",
        "--source",
        "--splits",
        "--vocab-size",
        "--workers",
        "--force",
        "--keep-work",
    ):
        assert option in stdout
