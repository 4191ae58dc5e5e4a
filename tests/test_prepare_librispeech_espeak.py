"""``fairseq-ln-prepare librispeech_espeak``: real TED sentences read by espeak-ng voices, written
in LibriSpeech's layout (16 kHz mono FLAC, trans.txt) and labelled synthetic; deterministic,
resumable, one-line errors. Needs the espeak-ng Debian package (.ci/run installs it)."""

import hashlib
import importlib.util
import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from conftest import BIN, SHARED_DATA, absent

from fairseq_layernorm_plugins import cli

SPLITS = ("train-clean-100", "dev-clean", "test-clean")
SIZES = {"train-clean-100": 12, "dev-clean": 3, "test-clean": 3}
SIZE_ARGS = ["--train-utterances", "12", "--dev-utterances", "3", "--test-utterances", "3", "--speakers", "6"]
XML = sorted((SHARED_DATA / "iwslt14" / "orig_de-en").glob("IWSLT14.*.en.xml"))


def require_espeak():
    """Skip (fail in CI, which installs it) without espeak-ng or soundfile."""
    reason = None
    if shutil.which("espeak-ng") is None:
        reason = "espeak-ng not installed (apt-get install espeak-ng; .ci/run installs it)"
    elif importlib.util.find_spec("soundfile") is None:
        reason = "soundfile not installed (pip install -e '.[speech]')"
    if reason:
        absent(reason)
    if len(XML) != 5:
        pytest.skip(f"{SHARED_DATA / 'iwslt14' / 'orig_de-en'}: not here (../shared/data)")


def prepare(*args):
    return subprocess.run(
        [str(BIN / "fairseq-ln-prepare"), "librispeech_espeak", *map(str, args)], capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Two builds with the same seed, one on two processes and one on one: (folder, stdout)."""
    require_espeak()
    root = tmp_path_factory.mktemp("espeak")
    outs = []
    for name, workers in (("a", 2), ("b", 1)):
        proc = prepare(*SIZE_ARGS, "--layout-only", "--workers", workers, "--out", root / name)
        assert proc.returncode == 0, proc.stderr[-3000:]
        outs.append((root / name, proc.stdout))
    return outs


def utterances(out):
    """{split: {utterance id: (flac path, transcript)}} as the trans.txt files list them."""
    found = {}
    for split in SPLITS:
        rows = {}
        for trans in sorted((out / "LibriSpeech" / split).glob("*/*/*.trans.txt")):
            speaker, chapter = trans.parent.parent.name, trans.parent.name
            assert trans.name == f"{speaker}-{chapter}.trans.txt"
            for line in trans.read_text().splitlines():
                uid, text = line.split(" ", 1)
                assert re.fullmatch(rf"{speaker}-{chapter}-\d{{4}}", uid)
                rows[uid] = (trans.parent / f"{uid}.flac", text)
        found[split] = rows
    return found


def spoken_text():
    """Every TED segment as one line of words, normalised here on its own (upper case, letters,
    apostrophes inside words, hyphens and punctuation as spaces): a transcript is a real
    sentence when it is a run of whole words of one of these."""
    lines = []
    for path in XML:
        for seg in re.findall(r"<seg id=\"\d+\">(.*?)</seg>", path.read_text(encoding="utf-8")):
            text = seg.replace("\u2019", "'").upper()
            text = re.sub(r"[^A-Z']", " ", text)
            text = re.sub(r"(?<![A-Z])'|'(?![A-Z])", " ", text)
            lines.append(" " + " ".join(text.split()) + " ")
    return lines


def test_layout_transcripts_and_audio_are_librispeechs_and_labelled_synthetic(built):
    import soundfile

    out, stdout = built[0]
    assert stdout.strip().endswith(f"prepare it: fairseq-ln-prepare librispeech --source {out / 'LibriSpeech'}")
    assert "SYNTHETIC" in stdout
    readme = (out / "README.txt").read_text()
    assert readme.startswith("SYNTHETIC SPEECH: NOT LIBRISPEECH") and "espeak-ng" in readme
    assert "CC BY-NC-ND 3.0" in readme and "IWSLT 2014 TED" in readme and "1.5" in readme  # the version
    assert (out / "LibriSpeech" / "README.TXT").read_text() == readme
    stamp = json.loads((out / "stamp.json").read_text())
    assert stamp["synthetic"] is True and stamp["sizes"] == SIZES
    assert sorted(p.name for p in out.parent.iterdir()) == ["a", "b"]  # no work folder or lock left

    found = utterances(out)
    assert {split: len(rows) for split, rows in found.items()} == SIZES
    assert sorted(p.name for p in (out / "LibriSpeech").iterdir()) == ["README.TXT", "SPEAKERS.TXT", *sorted(SPLITS)]
    for split in SPLITS:  # every FLAC has its transcript and the other way round
        flacs = sorted((out / "LibriSpeech" / split).glob("*/*/*.flac"))
        assert flacs == sorted(path for path, _ in found[split].values())

    # transcripts: real TED sentences, written as LibriSpeech writes them, each in one split
    segments = spoken_text()
    for rows in found.values():
        for _, text in rows.values():
            assert re.fullmatch(r"[A-Z]+('[A-Z]+)*( [A-Z]+('[A-Z]+)*)*", text) and 3 <= len(text.split()) <= 16
            assert any(f" {text} " in line for line in segments), text
    texts = [{text for _, text in rows.values()} for rows in found.values()]
    assert sum(map(len, texts)) == sum(SIZES.values())  # no sentence twice, within or across splits

    # speakers: disjoint across splits, as SPEAKERS.TXT says
    speakers = {split: {uid.split("-")[0] for uid in rows} for split, rows in found.items()}
    assert not (speakers["train-clean-100"] & (speakers["dev-clean"] | speakers["test-clean"]))
    assert not speakers["dev-clean"] & speakers["test-clean"]
    table = [line.split("|") for line in (out / "LibriSpeech" / "SPEAKERS.TXT").read_text().splitlines()]
    listed = {row[0].strip(): row[2].strip() for row in table if not row[0].startswith(";")}
    assert listed == {s: split for split, ids in speakers.items() for s in ids}
    assert all("espeak-ng -v en" in row[4] for row in table if not row[0].startswith(";"))

    # audio: 16 kHz mono 16-bit, as long as its words, not silent
    for rows in found.values():
        for path, text in rows.values():
            info = soundfile.info(path)
            assert (info.samplerate, info.channels, info.subtype, info.format) == (16000, 1, "PCM_16", "FLAC")
            samples, _ = soundfile.read(path, dtype="float32")
            words, seconds = len(text.split()), len(samples) / 16000
            assert 0.15 * words <= seconds <= 1.0 * words + 0.6, (path.name, words, seconds)  # + trailing silence
            assert np.sqrt(np.mean(samples**2)) > 0.01, path.name
            assert np.mean(np.abs(samples) >= 0.999) < 1e-4, path.name  # not clipped


def test_same_seed_same_transcripts_and_same_flac_bytes_whatever_the_workers(built):
    (a, _), (b, _) = built

    def digests(out):
        return {
            str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((out / "LibriSpeech").rglob("*"))
            if p.is_file()
        }

    assert utterances(a).keys() == utterances(b).keys()
    assert digests(a) == digests(b) and len(digests(a)) > sum(SIZES.values())
    assert json.loads((a / "stamp.json").read_text())["key"] == json.loads((b / "stamp.json").read_text())["key"]


def test_a_rerun_does_nothing_and_another_seed_draws_other_sentences(built, tmp_path):
    out, _ = built[0]
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    rerun = prepare(*SIZE_ARGS, "--layout-only", "--out", out)
    assert rerun.returncode == 0 and "up to date" in rerun.stderr
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before
    other = prepare(*SIZE_ARGS, "--layout-only", "--seed", 2, "--out", tmp_path / "seed2")
    assert other.returncode == 0, other.stderr[-3000:]
    mine = {t for rows in utterances(out).values() for _, t in rows.values()}
    theirs = {t for rows in utterances(tmp_path / "seed2").values() for _, t in rows.values()}
    assert mine != theirs


def test_different_voices_read_the_same_sentence_differently():
    require_espeak()
    from fairseq_layernorm_plugins.prepare.librispeech_espeak import draw_speakers, synthesise

    speakers = [s for group in draw_speakers(8, seed=1).values() for s in group]
    sentence = "And the source was a man, charming, rugged, homeless."
    audio = {s["voice"]: synthesise(sentence, s) for s in speakers[:4]}
    assert len(audio) == 4  # four different voices
    assert np.array_equal(synthesise(sentence, speakers[0]), audio[speakers[0]["voice"]])  # deterministic
    first, *others = (a.astype(np.float64) for a in audio.values())
    for other in others:
        n = min(len(first), len(other))
        assert np.sqrt(np.mean((first[:n] - other[:n]) ** 2)) > 0.5 * np.sqrt(np.mean(first[:n] ** 2))


def test_normalisation_is_librispeechs_and_unreadable_sentences_are_dropped():
    from fairseq_layernorm_plugins.prepare.librispeech_espeak import transcript, usable

    assert (
        transcript("\"Well,\" she said -- it's the self-interest: 'yes'?") == "WELL SHE SAID IT'S THE SELF INTEREST YES"
    )
    assert usable("And I'm telling a story that many of you know.") == "AND I'M TELLING A STORY THAT MANY OF YOU KNOW"
    for dropped in (
        "He was 30 years old.",  # digits: not spelled out
        "It cost $ a lot of money.",
        "Mr. Smith went to Washington.",
        "They sequenced the DNA of mice.",
        "Thank you.",  # two words
        " ".join(["word"] * 17),
        "Caf\u00e9 society was fun.",
    ):
        assert usable(dropped) is None, dropped


def prepare_in_process(capsys, monkeypatch, *args):
    """The command's own entry point in this process: (exit code, stderr)."""
    monkeypatch.setattr("sys.argv", ["fairseq-ln-prepare"])
    with pytest.raises(SystemExit) as exit:
        cli.prepare(["librispeech_espeak", *map(str, args)])
    return exit.value.code, capsys.readouterr().err


def test_errors_are_one_line_and_write_nothing(tmp_path, capsys, monkeypatch):
    require_espeak()
    out = tmp_path / "out"

    def fails(*args, says):
        code, err = prepare_in_process(capsys, monkeypatch, *SIZE_ARGS, "--layout-only", "--out", out, *args)
        assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and says in err, err
        assert not out.exists() or sorted(p.name for p in out.iterdir()) == ["notes.txt"]

    empty = tmp_path / "empty"
    empty.mkdir()
    fails("--shared-data", empty, says=f"{empty}/iwslt14/orig_de-en/IWSLT14.TED.dev2010.de-en.en.xml: not found")
    fails("--train-utterances", 5000, says="usable sentences")
    fails("--speakers", 2, says="argument --speakers: must be 3 to 80")
    with monkeypatch.context() as m:
        m.setenv("PATH", str(empty))
        fails(says="espeak-ng: not found on PATH; install it: apt-get install espeak-ng")
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    fails(says="holds files this command did not write (notes.txt)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "out"]


@pytest.mark.skipif(
    importlib.util.find_spec("fairseq_layernorm_plugins.prepare.librispeech") is None,
    reason="fairseq-ln-prepare librispeech (prepare/librispeech.py) is not here yet",
)
def test_the_corpus_goes_through_fairseq_ln_prepare_librispeech(built, tmp_path):
    """Without --layout-only, the same command runs fairseq-ln-prepare librispeech on the
    layout into OUT/s2t, whose line names the --data to train on; the corpus is reused."""
    source, _ = built[0]
    out = tmp_path / "espeak"
    shutil.copytree(source, out)
    proc = prepare(*SIZE_ARGS, "--vocab-size", 40, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the synthetic corpus is up to date" in proc.stderr
    assert f"--data {out / 's2t'}" in proc.stdout.strip().splitlines()[-1]
    assert sorted(p.name for p in out.iterdir()) == ["LibriSpeech", "README.txt", "s2t", "stamp.json"]
