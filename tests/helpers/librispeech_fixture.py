"""A small corpus in LibriSpeech's own layout made of real recordings: Debian's
``pocketsphinx-testdata`` (CMU Sphinx's test data, BSD-2), 16-bit 16 kHz mono speech with
the transcripts the package states:

- ``librivox/*.wav``: five sentences of a LibriVox reading of Sense and Sensibility (the
  source of LibriSpeech itself), transcripts in ``librivox/transcription``;
- ``cards/*.wav``: five spoken playing cards, transcripts in ``cards/cards.transcription``.

Its raw PCM files (``goforward.raw``, ``numbers.raw``, ``something.raw``,
``tidigits/dhd.2934z.raw``) are left out: no file of the package gives their words
(``goforward.gram``/``.fsg``/``.kws`` are grammars and keywords, not transcripts, and
``tidigits.lsn`` lists the ``.mfc`` features only).

Written as LibriSpeech writes itself: ``SPLIT/SPEAKER/CHAPTER/SPEAKER-CHAPTER-NNNN.flac`` and
``SPEAKER-CHAPTER.trans.txt`` with upper-case transcripts, under made-up but fixed speakers and
chapters (the LibriVox reader 1001, chapter 100; the card speaker 1002, chapter 200), split
6 train-clean-100 / 1 dev-clean / 3 test-clean (:data:`SPLIT_OF`). ``other_sets=True`` also
writes dev-other and test-other, as the recipes score all four: the dev-clean and test-clean
recordings again, under speakers 2001 and 2002.
"""

import re
from dataclasses import dataclass
from pathlib import Path

from conftest import absent

TESTDATA = Path("/usr/share/pocketsphinx/test/data")
SOURCES = {  # folder: (transcription file, speaker, chapter)
    "librivox": ("transcription", "1001", "100"),
    "cards": ("cards.transcription", "1002", "200"),
}
# utterance id: split (most to train; dev and test reuse train's speakers)
SPLIT_OF = {
    "1001-100-0870": "train-clean-100",
    "1001-100-0880": "dev-clean",
    "1001-100-0890": "train-clean-100",
    "1001-100-0920": "train-clean-100",
    "1001-100-0930": "test-clean",
    "1002-200-0001": "train-clean-100",
    "1002-200-0002": "train-clean-100",
    "1002-200-0003": "test-clean",
    "1002-200-0004": "test-clean",
    "1002-200-0005": "train-clean-100",
}
LINE = re.compile(r"<s>\s+(.*?)\s+</s>\s+\((\S+)\)")  # "<s> words </s> (file id)"


@dataclass(frozen=True)
class Utterance:
    id: str  # SPEAKER-CHAPTER-NNNN
    split: str
    wav: Path  # the package's recording
    transcript: str  # upper case, as LibriSpeech writes it

    @property
    def speaker(self):
        return self.id.split("-")[0]


def require_testdata():
    """The package's data folder; skip the test (fail it in CI) when it is not installed."""
    if not (TESTDATA / "librivox" / "transcription").is_file():
        reason = f"{TESTDATA} not found: apt-get install pocketsphinx-testdata (real recordings for LibriSpeech tests)"
        absent(reason)
    return TESTDATA


def utterances():
    """The ten :class:`Utterance` s, in id order."""
    data = require_testdata()
    found = []
    for folder, (transcription, speaker, chapter) in SOURCES.items():
        for line in (data / folder / transcription).read_text(encoding="utf-8").splitlines():
            words, file_id = LINE.fullmatch(line.strip()).groups()
            number = int(file_id.rsplit("-", 1)[-1])  # sense_and_sensibility_01_austen_64kb-0870, 001
            utterance = f"{speaker}-{chapter}-{number:04d}"
            wav = data / folder / f"{file_id}.wav"
            found.append(Utterance(utterance, SPLIT_OF[utterance], wav, " ".join(words.split()).upper()))
    assert sorted(u.id for u in found) == sorted(SPLIT_OF), "pocketsphinx-testdata: not the files this expects"
    return sorted(found, key=lambda u: u.id)


def build_librispeech_fixture(root, other_sets=False):
    """Write the corpus under ``root/LibriSpeech`` (FLAC, 16-bit, as LibriSpeech's); returns that folder."""
    import soundfile

    top = Path(root) / "LibriSpeech"
    chapters = {}
    placed = [(u, u.split, u.id) for u in utterances()]
    if other_sets:
        placed += [
            (u, u.split.replace("clean", "other"), f"{int(u.speaker) + 1000}{u.id[4:]}")
            for u in utterances()
            if u.split in ("dev-clean", "test-clean")
        ]
    for u, split, utterance in placed:
        speaker, chapter, _ = utterance.split("-")
        folder = top / split / speaker / chapter
        folder.mkdir(parents=True, exist_ok=True)
        samples, rate = soundfile.read(u.wav, dtype="int16")
        assert rate == 16000 and samples.ndim == 1, u.wav
        soundfile.write(folder / f"{utterance}.flac", samples, rate, format="FLAC", subtype="PCM_16")
        chapters.setdefault(folder / f"{speaker}-{chapter}.trans.txt", []).append(f"{utterance} {u.transcript}\n")
    for trans, lines in chapters.items():
        trans.write_text("".join(lines), encoding="utf-8")
    return top
