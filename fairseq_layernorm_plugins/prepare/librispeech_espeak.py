"""LibriSpeech-espeak: a SYNTHETIC speech corpus in LibriSpeech's own layout, read aloud by
espeak-ng from real English sentences of ``../shared/data`` (see its PROVENANCE.md), then
prepared by ``fairseq-ln-prepare librispeech`` (fairseq's speech_to_text data), for CPU-scale
speech recognition runs. Real sentences, machine voices: not LibriSpeech, and no number from
it compares with the paper's LibriSpeech numbers.

Sentences: the English side of the IWSLT14 TED dev/test transcripts (``iwslt14/orig_de-en``,
6,750 segments of spoken English, split into sentences), those of 3 to 16 words with letters,
apostrophes, hyphens and plain punctuation only (a sentence with a digit, another symbol, an
abbreviation such as "Mr." or an acronym such as "DNA" is dropped, not spelled out); their
transcripts are written as LibriSpeech writes its own: upper case, letters, apostrophes and
single spaces (punctuation dropped, hyphens as spaces). Each sentence is used once: the splits
never share one; ``--seed`` draws them (test first, then dev, then train, so that another
``--train-utterances`` keeps dev and test as they were).

Speakers: a speaker is one espeak-ng voice (8 English accents: British, American, Scottish,
Lancastrian, Received Pronunciation, West Midlands, Caribbean, New York City) with one voice
variant (male ``m1``-``m7``, the Klatt voices, the plain voice, female ``f1``-``f5``), one rate
(130-190 words a minute), one pitch (30-70) and one amplitude (55-85), drawn by ``--seed``,
half of them female.
As in LibriSpeech, the splits' speakers are disjoint, and no two speakers share a voice and
variant; accents and variants on their own do recur across splits. Each speaker reads one
chapter.

Written to OUT (default ``data/librispeech-espeak``)::

    OUT/README.txt                        what this is (synthetic), how it was made, licences
    OUT/LibriSpeech/README.TXT            the same, beside the audio
    OUT/LibriSpeech/SPEAKERS.TXT          LibriSpeech's speaker table (NAME: the espeak-ng voice)
    OUT/LibriSpeech/{train-clean-100,dev-clean,test-clean}/SPEAKER/CHAPTER/
        SPEAKER-CHAPTER-NNNN.flac         16 kHz mono 16-bit FLAC
        SPEAKER-CHAPTER.trans.txt         "SPEAKER-CHAPTER-NNNN TRANSCRIPT" lines
    OUT/s2t/                              fairseq-ln-prepare librispeech --source OUT/LibriSpeech
                                          (skipped with --layout-only)

espeak-ng writes 22,050 Hz audio; it is resampled to 16 kHz with a polyphase filter
(``scipy.signal.resample_poly``). The same seed, sentences and espeak-ng build give the same
transcripts and the same FLAC bytes, whatever ``--workers``. Synthesis is resumable split by
split (``OUT.work``); a rerun with the same options does nothing.
"""

import argparse
import functools
import json
import logging
import math
import os
import random
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

from fairseq_layernorm_plugins.prepare.cli import (
    add_common_args,
    add_shared_data_arg,
    argument_parser,
    in_data,
    positive,
    run_cli,
)
from fairseq_layernorm_plugins.prepare.dataset import current_stamp
from fairseq_layernorm_plugins.prepare.iwslt14 import TEST_SETS
from fairseq_layernorm_plugins.prepare.moses import straight_apostrophe, xml_segments
from fairseq_layernorm_plugins.prepare.output import STAMP_FILE, output_directory
from fairseq_layernorm_plugins.prepare.parallel import map_lines
from fairseq_layernorm_plugins.prepare.steps import Steps, one_at_a_time
from fairseq_layernorm_plugins.prepare.textio import DataError, read_lines, write_lines

logger = logging.getLogger(__name__)

ORIG = Path("iwslt14") / "orig_de-en"
XML_FILES = tuple(ORIG / f"{name}.de-en.en.xml" for name in TEST_SETS)
SOURCE_LICENCE = (
    "TED talks (IWSLT 2014 dev/test sets), (c) TED Conference LLC, CC BY-NC-ND 3.0: non-commercial research use only"
)

SPLITS = ("train-clean-100", "dev-clean", "test-clean")  # LibriSpeech's names: librispeech.py reads them as they are
SIZES = {"train-clean-100": 2000, "dev-clean": 200, "test-clean": 200}
MIN_WORDS, MAX_WORDS = 3, 16  # 0.9 to 9 s at 130-190 words a minute; 3.4 s on average, 90% within 1.5-6 s

ESPEAK = "espeak-ng"
VOICES = ("en-gb", "en-us", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp", "en-gb-x-gbcwmd", "en-029", "en-us-nyc")
MALE_VARIANTS = ("", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "klatt", "klatt2", "klatt3")  # "": the voice itself
FEMALE_VARIANTS = ("f1", "f2", "f3", "f4", "f5")  # whisper, croak, robots and the like are left out
RATES = (130, 190)  # words a minute (espeak-ng -s; its default is 175)
PITCHES = (30, 70)  # espeak-ng -p, 0-99 (default 50)
# espeak-ng -a (default 100): below it, as its loudest voices come close enough to full scale at
# 100 that resampling's ringing clips a few percent of their utterances
AMPLITUDES = (55, 85)
SPEAKERS = 40
MAX_SPEAKERS = 2 * len(VOICES) * len(FEMALE_VARIANTS)  # half female, no (voice, variant) twice
FIRST_SPEAKER = 9001  # above every LibriSpeech speaker id, so the two never mix unnoticed
SAMPLE_RATE = 16000
# fairseq's LibriSpeech recipe learns a 10,000-unit SentencePiece unigram model on 281k
# utterances (960 h, ~90k word types). The 2,000 training sentences here hold ~18,600 words of
# ~3,250 types: 10,000 units cannot even be learnt from them (SentencePiece's unigram model
# finds under 3,000 there), and anything near that would be whole words seen once or twice.
# 1,000 units keep the frequent words whole and split the rest into pieces seen often enough.
VOCAB_SIZE = 1000
S2T = "s2t"  # OUT/s2t: what fairseq-ln-prepare librispeech makes of OUT/LibriSpeech
FORMAT = 1  # bump when the audio or the layout written changes

_QUOTES = str.maketrans({"\u2018": "'", "\u201c": '"', "\u201d": '"'})  # \u2019: straight_apostrophe
_SENTENCE_END = re.compile(r"(?:(?<=[.?!])|(?<=[.?!]\"))\s+(?=[\"A-Z])")
_ALLOWED = re.compile(r"[A-Za-z ,.?!;:'\"-]+")
_ABBREVIATION = re.compile(
    r"\b(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|Prof|Mt|No|vs|etc|Inc|Co|Ltd|Gen|Gov|Sen|Rev|Capt|Lt|Col|Sgt)\.|\b[A-Za-z]\.[A-Za-z]"
)
_ACRONYM = re.compile(r"[A-Z]{2,}")  # TV, DNA, NASA: espeak-ng spells some, reads others
_TRANSCRIPT = re.compile(r"[A-Z]+(?:'[A-Z]+)*(?: [A-Z]+(?:'[A-Z]+)*)*")


def transcript(sentence):
    """``sentence`` as LibriSpeech writes a transcript: upper case, letters, apostrophes
    within words, single spaces; punctuation dropped and hyphens read as spaces."""
    text = re.sub(r"[-,.?!;:\"]", " ", sentence)
    text = re.sub(r"(?<![A-Za-z])'|'(?![A-Za-z])", " ", text)  # quotation marks, not apostrophes
    return " ".join(text.upper().split())


def usable(sentence):
    """The transcript of ``sentence`` if espeak-ng can read it as written (plain words and
    punctuation, no digits, symbols, abbreviations or acronyms) in MIN_WORDS..MAX_WORDS words;
    else None."""
    if not _ALLOWED.fullmatch(sentence) or _ABBREVIATION.search(sentence) or _ACRONYM.search(sentence):
        return None
    text = transcript(sentence)
    if not MIN_WORDS <= len(text.split()) <= MAX_WORDS or not _TRANSCRIPT.fullmatch(text):
        return None
    return text


def sentences(shared_data):
    """[(sentence as read aloud, transcript)] of the TED transcripts, in corpus order, each
    transcript once (its first sentence)."""
    found, seen = [], set()
    for name in XML_FILES:
        for segment in xml_segments(read_lines(Path(shared_data) / name)):
            segment = straight_apostrophe(segment.translate(_QUOTES)).strip()
            for sentence in _SENTENCE_END.split(segment):
                text = usable(sentence.strip())
                if text is not None and text not in seen:
                    seen.add(text)
                    found.append((sentence.strip(), text))
    return found


def choose_sentences(found, sizes, seed):
    """{split: [(sentence, transcript)]}: ``sizes[split]`` sentences each, drawn by ``seed``
    without replacement; test first, then dev, then train (more train keeps dev and test)."""
    needed = sum(sizes.values())
    if needed > len(found):
        raise DataError(
            f"{needed} utterances asked but the TED transcripts hold {len(found)} usable sentences "
            f"({MIN_WORDS}-{MAX_WORDS} words, no digits or symbols); ask for fewer"
        )
    order = list(found)
    random.Random(f"{seed}:sentences").shuffle(order)
    chosen, start = {}, 0
    for split in reversed(SPLITS):
        chosen[split], start = order[start : start + sizes[split]], start + sizes[split]
    return {split: chosen[split] for split in SPLITS}


def draw_speakers(n, seed):
    """{split: [speaker]}: ``n`` speakers, each a dict of id, voice (with its variant), rate,
    pitch, amplitude and sex, drawn by ``seed``; no two share a voice and variant, half are
    female; test and dev get ``max(1, n // 8)`` each (as LibriSpeech's 40 of ~330 in its clean
    sets), train the rest."""
    rng = random.Random(f"{seed}:speakers")
    female = rng.sample([(v, var) for v in VOICES for var in FEMALE_VARIANTS], n // 2)
    male = rng.sample([(v, var) for v in VOICES for var in MALE_VARIANTS], n - n // 2)
    people = []
    for i in range(n):  # alternately female and male, so that every split gets both
        (voice, variant), sex = (female.pop(), "F") if i % 2 == 0 and female else (male.pop(), "M")
        people.append(
            {
                "id": FIRST_SPEAKER + i,
                "voice": voice + (f"+{variant}" if variant else ""),
                "rate": rng.randint(*RATES),
                "pitch": rng.randint(*PITCHES),
                "amplitude": rng.randint(*AMPLITUDES),
                "sex": sex,
            }
        )
    held_out = max(1, n // 8)
    return {
        "test-clean": people[:held_out],
        "dev-clean": people[held_out : 2 * held_out],
        "train-clean-100": people[2 * held_out :],
    }


def chapter_of(speaker):
    return speaker["id"] * 100 + 1  # one chapter a speaker


def plan(chosen, speakers):
    """{split: [(relative flac path, sentence, transcript, speaker)]}: the split's sentences
    dealt to its speakers in turn, numbered within each speaker's chapter."""
    planned = {}
    for split in SPLITS:
        people, counts, rows = speakers[split], {}, []
        for i, (sentence, text) in enumerate(chosen[split]):
            speaker = people[i % len(people)]
            number = counts[speaker["id"]] = counts.get(speaker["id"], -1) + 1
            chapter = chapter_of(speaker)
            name = f"{speaker['id']}-{chapter}-{number:04d}"
            rows.append((f"{speaker['id']}/{chapter}/{name}.flac", sentence, text, speaker))
        planned[split] = rows
    return planned


# --- espeak-ng -------------------------------------------------------------------------------


def espeak_version():
    """espeak-ng's version line, or a DataError saying how to install it."""
    if shutil.which(ESPEAK) is None:
        raise DataError(f"{ESPEAK}: not found on PATH; install it: apt-get install espeak-ng")
    proc = subprocess.run([ESPEAK, "--version"], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise DataError(f"{ESPEAK} --version failed (exit {proc.returncode}); reinstall it: apt-get install espeak-ng")
    return proc.stdout.strip().splitlines()[0].split("  Data at:")[0].strip()  # not where this machine keeps its data


def package_version():
    """The Debian package of espeak-ng, if dpkg knows it ("1.51+dfsg-10+deb12u2"), for the README."""
    try:
        proc = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", ESPEAK], capture_output=True, text=True)
    except OSError:
        return None
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def check_voices(speakers):
    """A DataError naming the first voice or variant the speakers use that this espeak-ng lacks."""

    def listed(kind, column):
        proc = subprocess.run([ESPEAK, f"--voices={kind}"], capture_output=True, text=True)
        rows = [line.split() for line in proc.stdout.splitlines()[1:]]
        return {row[column] for row in rows if len(row) > column}

    languages = listed("en", 1)
    variants = {name.removeprefix("!v/") for name in listed("variant", 4)}
    for speaker in (s for people in speakers.values() for s in people):
        voice, _, variant = speaker["voice"].partition("+")
        if voice not in languages or (variant and variant not in variants):
            missing = voice if voice not in languages else f"variant {variant}"
            raise DataError(
                f"{ESPEAK} has no voice {missing} (espeak-ng-data); reinstall it: apt-get install espeak-ng"
            )


def _wav_samples(data, what):
    """(rate, int16 samples) of the 16-bit mono PCM WAV espeak-ng writes to stdout (its
    header's sizes are left unset when streaming, so the data is what follows the header)."""
    import numpy as np

    if len(data) < 44 or data[:4] != b"RIFF" or data[8:16] != b"WAVEfmt " or data[36:40] != b"data":
        raise DataError(f"{what}: espeak-ng wrote no WAV audio")
    fmt, channels, rate = int.from_bytes(data[20:22], "little"), data[22], int.from_bytes(data[24:28], "little")
    bits = int.from_bytes(data[34:36], "little")
    if (fmt, channels, bits) != (1, 1, 16):
        raise DataError(f"{what}: espeak-ng wrote format {fmt}, {channels} channels, {bits} bits, not 16-bit mono PCM")
    return rate, np.frombuffer(data[44 : 44 + (len(data) - 44) // 2 * 2], dtype="<i2")


def synthesise(sentence, speaker):
    """``sentence`` read by ``speaker`` (see :func:`draw_speakers`): int16 samples at 16 kHz.
    The text goes in on stdin (a sentence starting with "-" is not an option)."""
    import numpy as np
    from scipy.signal import resample_poly

    cmd = [ESPEAK, "-v", speaker["voice"], "-s", str(speaker["rate"]), "-p", str(speaker["pitch"])]
    cmd += ["-a", str(speaker["amplitude"]), "--stdout"]
    what = " ".join(cmd) + f" <<< {sentence!r}"
    proc = subprocess.run(cmd, input=sentence.encode("utf-8"), capture_output=True)
    if proc.returncode != 0:
        raise DataError(f"{what}: exit {proc.returncode}: {proc.stderr.decode(errors='replace').strip()[:200]}")
    rate, samples = _wav_samples(proc.stdout, what)
    if rate != SAMPLE_RATE:
        g = math.gcd(rate, SAMPLE_RATE)
        resampled = resample_poly(samples.astype(np.float64), SAMPLE_RATE // g, rate // g)
        samples = np.clip(np.round(resampled), -32768, 32767).astype(np.int16)
    if len(samples) < SAMPLE_RATE // 10 or not np.any(samples):
        raise DataError(f"{what}: espeak-ng wrote {len(samples)} samples of silence")
    return samples


def _write_utterance(root, row):
    """Synthesise one planned utterance into ``root``; returns its length in samples."""
    import soundfile

    path, sentence, _, speaker = row
    samples = synthesise(sentence, speaker)
    soundfile.write(root / path, samples, SAMPLE_RATE, format="FLAC", subtype="PCM_16")
    return len(samples)


def write_split(split, rows, workers, out):
    """One split's folder of the layout: FLACs, each chapter's trans.txt, lengths.tsv
    (utterance, samples: for the README's totals)."""
    for chapter in sorted({Path(path).parent for path, *_ in rows}):
        (out / chapter).mkdir(parents=True)
        name = f"{chapter.parent.name}-{chapter.name}"
        lines = sorted(f"{Path(path).stem} {text}" for path, _, text, _ in rows if Path(path).parent == chapter)
        write_lines(out / chapter / f"{name}.trans.txt", lines)
    lengths = map_lines(
        functools.partial(_write_utterance, out), rows, workers, desc=f"espeak-ng {split}", chunk_size=8
    )
    write_lines(out / "lengths.tsv", [f"{Path(row[0]).stem}\t{n}" for row, n in zip(rows, lengths)])


# --- the corpus folder ---------------------------------------------------------------------------


def speakers_table(speakers, seconds):
    """LibriSpeech's SPEAKERS.TXT, its NAME the espeak-ng voice."""
    lines = [
        "; SYNTHETIC: espeak-ng voices, not LibriSpeech readers (see README.TXT)",
        "; Each NAME is the espeak-ng voice, rate (words a minute), pitch and amplitude of that speaker.",
        ";ID  |SEX| SUBSET           |MINUTES| NAME",
    ]
    for split in SPLITS:
        for s in speakers[split]:
            minutes = seconds.get(s["id"], 0) / 60
            name = f"espeak-ng -v {s['voice']} -s {s['rate']} -p {s['pitch']} -a {s['amplitude']}"
            lines.append(f"{s['id']:<5}| {s['sex']} | {split:<17}| {minutes:5.2f} | {name}")
    return lines


def readme(version, speakers, sizes, hours, seed):
    voices = sorted({s["voice"] for people in speakers.values() for s in people})
    voices = textwrap.fill("Voices used: " + ", ".join(voices), 92, subsequent_indent=" " * 13, break_on_hyphens=False)
    package = f" (Debian package espeak-ng {package_version()})" if package_version() else ""
    return f"""SYNTHETIC SPEECH: NOT LIBRISPEECH
=================================

Everything under LibriSpeech/ here is machine speech: espeak-ng reading real English
sentences. It is laid out as LibriSpeech is (split/speaker/chapter, 16 kHz FLAC, trans.txt)
only so that the same preparation reads it; no LibriVox reader, book or recording is in it,
and no result on it compares with results on LibriSpeech.

Made by:     fairseq-ln-prepare librispeech_espeak (fairseq_layernorm_plugins), seed {seed}
Synthesiser: {version}{package},
             its 22,050 Hz output resampled to 16 kHz (scipy.signal.resample_poly), 16-bit FLAC
Utterances:  {", ".join(f"{split} {n}" for split, n in sizes.items())} ({hours:.2f} hours in all)
Speakers:    {sum(len(p) for p in speakers.values())}, each one espeak-ng voice+variant, rate, pitch and
             amplitude (LibriSpeech/SPEAKERS.TXT); the splits' speakers are disjoint
{voices}

Sentences:   the English side of the IWSLT 2014 TED dev/test transcripts
             (iwslt14/orig_de-en/IWSLT14.*.en.xml of the shared data), sentences of
             {MIN_WORDS}-{MAX_WORDS} words without digits, symbols, abbreviations or acronyms;
             every sentence is in one split only. Transcripts are upper case, letters,
             apostrophes and spaces, as LibriSpeech writes them.
Licence:     the sentences: {SOURCE_LICENCE}.
             That licence allows no adaptations to be shared, and a recording of a reading
             may count as one: use this audio locally, do not redistribute it. (espeak-ng
             itself is GPL-3.0-or-later; the GPL does not cover a program's output as such.)
"""


def build_corpus(out_dir, steps, planned, speakers, version, seed, workers, key):
    """Write OUT: LibriSpeech/<split>/... from the split steps, the READMEs and the stamp."""
    built = {}
    for split in SPLITS:
        options = {"rows": [row[:3] + (row[3],) for row in planned[split]]}
        options.update(espeak=version, sample_rate=SAMPLE_RATE, format=FORMAT)
        step = steps.run(split, functools.partial(write_split, split, planned[split], workers), options=options)
        built[split] = step.ready()
    seconds, lengths = {}, []
    for split in SPLITS:
        for line in read_lines(built[split] / "lengths.tsv"):
            utterance, n = line.split("\t")
            lengths.append(int(n) / SAMPLE_RATE)
            speaker = int(utterance.split("-")[0])
            seconds[speaker] = seconds.get(speaker, 0) + int(n) / SAMPLE_RATE
    sizes = {split: len(planned[split]) for split in SPLITS}
    hours = sum(lengths) / 3600
    with output_directory(out_dir) as tmp:
        root = tmp / "LibriSpeech"
        root.mkdir()
        for split in SPLITS:  # hard links: the steps stay whole (and resumable) until OUT is in place
            ignore = shutil.ignore_patterns(".stamp", "lengths.tsv")
            shutil.copytree(built[split], root / split, ignore=ignore, copy_function=_link_or_copy)
        text = readme(version, speakers, sizes, hours, seed)
        (tmp / "README.txt").write_text(text, encoding="utf-8")
        (root / "README.TXT").write_text(text, encoding="utf-8")
        write_lines(root / "SPEAKERS.TXT", speakers_table(speakers, seconds))
        content = {
            "key": key,
            "recipe": "librispeech_espeak",
            "synthetic": True,
            "sizes": sizes,
            "speakers": {split: len(speakers[split]) for split in SPLITS},
            "hours": round(hours, 4),
            "mean_seconds": round(sum(lengths) / len(lengths), 3),
            "espeak_ng": version,
            "source": f"{ORIG}/*.en.xml (IWSLT14 TED dev/test), {SOURCE_LICENCE}",
            "seed": seed,
            # what this command writes in OUT, and may replace next time: fairseq-ln-prepare
            # librispeech's output and, while it runs or after it failed, its lock and steps
            "files": sorted({e.name for e in tmp.iterdir()} | {STAMP_FILE, S2T, f"{S2T}.work", f"{S2T}.lock"}),
        }
        (tmp / STAMP_FILE).write_text(json.dumps(content, indent=1))
    return content


def _link_or_copy(source, destination):
    """A hard link of ``source`` (OUT.work lies beside OUT), or a copy where links fail."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


@one_at_a_time
def prepare(
    out_dir,
    shared_data,
    sizes=SIZES,
    speakers=SPEAKERS,
    seed=1,
    vocab_size=VOCAB_SIZE,
    layout_only=False,
    workers=2,
    force=False,
    keep_work=False,
):
    """Build the synthetic corpus in ``out_dir`` (unless its stamp is up to date), then, unless
    ``layout_only``, ``fairseq-ln-prepare librispeech`` on it into ``out_dir/s2t``. Returns the
    corpus's stamp."""
    out_dir = Path(out_dir)
    missing = [name for name in XML_FILES if not (Path(shared_data) / name).is_file()]
    if missing:
        raise DataError(f"{Path(shared_data) / missing[0]}: not found (the TED transcripts these sentences come from)")
    version = espeak_version()
    for module in ("numpy", "scipy", "soundfile"):
        try:
            __import__(module)
        except ImportError:
            raise DataError(
                f"{module} is not installed: pip install -e '.[speech]' (or pip install {module})"
            ) from None
    chosen = choose_sentences(sentences(shared_data), sizes, seed)
    # a speaker reads at least one sentence: a split of fewer utterances than speakers has fewer speakers
    people = {split: group[: sizes[split]] for split, group in draw_speakers(speakers, seed).items()}
    check_voices(people)
    planned = plan(chosen, people)
    inputs = [Path(shared_data) / name for name in XML_FILES]
    options = {
        "recipe": "librispeech_espeak",
        "sizes": sizes,
        "speakers": people,
        "seed": seed,
        "espeak": version,
        "sample_rate": SAMPLE_RATE,
        "format": FORMAT,
    }
    key = Steps.key("corpus", inputs, options)
    stamp = None if force else current_stamp(out_dir, key)
    if stamp is not None:
        logger.info("%s: the synthetic corpus is up to date (same sentences, speakers and espeak-ng)", out_dir)
    else:
        steps = Steps(out_dir.with_name(out_dir.name + ".work"), force)
        stamp = build_corpus(out_dir, steps, planned, people, version, seed, workers, key)
        if not keep_work:
            steps.clean()
    logger.info(
        "%s: SYNTHETIC (espeak-ng) corpus, %s; %.2f hours, %.2f s an utterance on average",
        out_dir / "LibriSpeech",
        ", ".join(f"{split} {n}" for split, n in stamp["sizes"].items()),
        stamp["hours"],
        stamp["mean_seconds"],
    )
    if not layout_only:
        from fairseq_layernorm_plugins.prepare import librispeech

        argv = ["--source", str(out_dir / "LibriSpeech"), "--splits", ",".join(SPLITS), "--out", str(out_dir / S2T)]
        argv += ["--vocab-size", str(vocab_size), "--workers", str(workers)]
        argv += ["--force"] * force + ["--keep-work"] * keep_work
        logger.info("fairseq-ln-prepare librispeech %s", " ".join(argv))
        librispeech.main(argv)  # prints the line naming the --data to train on
    return stamp


def main(argv=None):
    parser = argument_parser(__doc__)
    add_shared_data_arg(parser)
    for split, option in zip(SPLITS, ("--train-utterances", "--dev-utterances", "--test-utterances")):
        parser.add_argument(
            option,
            type=positive,
            default=SIZES[split],
            help=f"utterances in {split}, each a different sentence (default: {SIZES[split]})",
        )
    parser.add_argument(
        "--speakers",
        type=speaker_count,
        default=SPEAKERS,
        help=f"espeak-ng speakers in all, 3 to {MAX_SPEAKERS}; dev and test get one eighth each (default: {SPEAKERS})",
    )
    parser.add_argument("--seed", type=int, default=1, help="draws the sentences and the speakers (default: 1)")
    parser.add_argument(
        "--vocab-size",
        type=positive,
        default=VOCAB_SIZE,
        help=f"SentencePiece units of fairseq-ln-prepare librispeech (default: {VOCAB_SIZE})",
    )
    parser.add_argument(
        "--layout-only", action="store_true", help="write the LibriSpeech layout only, not the speech_to_text data"
    )
    parser.add_argument(
        "--out", default=in_data("librispeech-espeak"), help="output directory (default: data/librispeech-espeak)"
    )
    add_common_args(parser, subsample=False, workers="processes for synthesis and preparation")
    args = parser.parse_args(argv)

    def summary(out_dir, stamp):  # else fairseq-ln-prepare librispeech's own last line names the --data
        if args.layout_only:
            sizes = ", ".join(f"{split} {n}" for split, n in stamp["sizes"].items())
            layout = out_dir / "LibriSpeech"
            return f"{layout}: SYNTHETIC speech, {sizes}; prepare it: fairseq-ln-prepare librispeech --source {layout}"
        return None

    sizes = dict(zip(SPLITS, (args.train_utterances, args.dev_utterances, args.test_utterances)))
    return run_cli(
        parser,
        prepare,
        args,
        summary=summary,
        out_dir=args.out,
        shared_data=args.shared_data,
        sizes=sizes,
        speakers=args.speakers,
        vocab_size=args.vocab_size,
        layout_only=args.layout_only,
    )


def speaker_count(text):
    """An argparse type: 3 to MAX_SPEAKERS speakers (one each for test and dev, one for train)."""
    value = int(text)
    if not 3 <= value <= MAX_SPEAKERS:
        raise argparse.ArgumentTypeError(f"must be 3 to {MAX_SPEAKERS}, not {value}")
    return value


speaker_count.__name__ = "speaker count"


if __name__ == "__main__":
    main()
