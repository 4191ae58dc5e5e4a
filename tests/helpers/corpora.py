"""Standard-shaped corpora built from real segments in ../shared/data, for the
preparation tests (nothing here is written into the repository)."""

import re
import shutil
import tarfile
from pathlib import Path

from fairseq_layernorm_plugins.prepare.iwslt14 import TEST_SETS

HEADER_TAGS = ("url", "keywords", "talkid", "title", "description")


def xml_to_train_tags(xml_path, max_segments=None):
    """A ``train.tags.de-en.*``-format text made from an IWSLT xml file: per talk its
    <url>/<keywords>/<talkid>/<title>/<description> lines, then one segment a line."""
    out, n = [], 0
    for line in Path(xml_path).read_text(encoding="utf-8").splitlines():
        tag = re.match(r"\s*<(\w+)", line)
        if tag and tag.group(1) in HEADER_TAGS:
            out.append(line.strip())
        elif "<seg id" in line and (max_segments is None or n < max_segments):
            out.append(re.sub(r"\s*<seg id=\"\d+\">\s*|\s*</seg>\s*", "", line))
            n += 1
    return out


def build_iwslt14_archive(orig_dir, destination, train_from=("IWSLT14.TED.tst2010", "IWSLT14.TED.tst2011"), drop=()):
    """A ``de-en.tgz`` laid out like the real one: train.tags.de-en.{de,en} made from the
    ``train_from`` xml files, and the five dev/test xml files. ``drop`` leaves members out."""
    staging = Path(destination).with_suffix(".staging") / "de-en"
    staging.mkdir(parents=True)
    for lang in ("de", "en"):
        lines = [line for name in train_from for line in xml_to_train_tags(Path(orig_dir) / f"{name}.de-en.{lang}.xml")]
        (staging / f"train.tags.de-en.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        for name in TEST_SETS:
            shutil.copy(Path(orig_dir) / f"{name}.de-en.{lang}.xml", staging)
    for name in drop:
        (staging / name).unlink()
    with tarfile.open(destination, "w:gz") as tar:
        tar.add(staging, arcname="de-en")
    shutil.rmtree(staging.parent)
    return Path(destination)


def build_google_wmt16_archive(shared, destination, train_lines=400, test_lines=200, merges=800, drop=()):
    """A ``wmt16_en_de.tar.gz`` laid out like Google's (flat member names): made as
    google/seq2seq's ``bin/data/wmt16_en_de.sh`` makes it, from real WMT text. Train is
    ``train_lines`` pairs of each of news-test2008, newstest2017, newstest2018 (raw; none of
    them a test set here) and the News Commentary sample; the test sets newstest2009-2016
    are their first ``test_lines`` lines. Every file is Moses-tokenised (``tokenizer.perl
    -l LANG``: escaped, no ``-a``), train cleaned to 1..80 tokens (clean-corpus-n, ratio 9),
    ``merges`` joint BPE merges learned by subword-nmt on train (German first, as the script
    concatenates) and applied to every tokenised file; ``vocab.bpe.32000`` lists the
    segmented train's types. ``drop`` leaves members out. Returns the staging folder
    (every member, by name) beside ``destination``."""
    from collections import Counter

    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe

    from fairseq_layernorm_plugins.prepare.moses import CleanCorpus, Tokenize
    from fairseq_layernorm_plugins.prepare.textio import read_lines, write_lines

    shared, destination = Path(shared), Path(destination)
    staging = destination.with_name(destination.name + ".members")
    staging.mkdir(parents=True)
    news = shared / "wmt_news_other" / "de-en"
    langs = ("en", "de")
    train = {lang: [] for lang in langs}
    for path in (news / "news-test2008", news / "newstest2017", news / "newstest2018"):
        for lang in langs:
            train[lang] += read_lines(f"{path}.{lang}")[:train_lines]
    nc = shared / "news_commentary" / "nc_v8_first20k" / "nc20000"
    for lang in langs:
        train[lang] += read_lines(f"{nc}.{lang}")[:train_lines]
    raw = {("train", lang): train[lang] for lang in langs}
    for year in range(2009, 2017):
        folder = shared / "wmt14" / "plain" if year in (2013, 2014) else news
        for lang in langs:
            raw[f"newstest{year}", lang] = read_lines(folder / f"newstest{year}.{lang}")[:test_lines]
    tokenizers = {lang: Tokenize(lang) for lang in langs}
    tok = {(name, lang): [tokenizers[lang](line) for line in lines] for (name, lang), lines in raw.items()}
    clean = CleanCorpus(1, 80, 9)
    kept = [pair for pair in map(clean, zip(tok["train", "en"], tok["train", "de"])) if pair]
    tok.pop(("train", "en")), tok.pop(("train", "de"))
    clean_train = {"en": [s for s, _ in kept], "de": [t for _, t in kept]}
    codes = staging / "bpe.32000"
    with open(codes, "w", encoding="utf-8") as out:
        learn_bpe((line + "\n" for lang in ("de", "en") for line in clean_train[lang]), out, merges)
    with open(codes, encoding="utf-8") as f:
        bpe = BPE(f)
    files = {
        f"train.tok.clean.bpe.32000.{lang}": [bpe.process_line(line) for line in clean_train[lang]] for lang in langs
    }
    for (name, lang), lines in tok.items():
        files[f"{name}.{lang}"] = raw[name, lang]
        files[f"{name}.tok.{lang}"] = lines
        files[f"{name}.tok.bpe.32000.{lang}"] = [bpe.process_line(line) for line in lines]
    types = Counter(
        word for lang in langs for line in files[f"train.tok.clean.bpe.32000.{lang}"] for word in line.split()
    )
    files["vocab.bpe.32000"] = [word for word, _ in types.most_common()]
    for name, lines in files.items():
        write_lines(staging / name, lines)
    tar_members(staging, destination, drop)
    return staging


def tar_members(staging, destination, drop=()):
    """``tar -czf destination`` of every file in ``staging`` but ``drop``, flat (as Google's)."""
    with tarfile.open(destination, "w:gz") as tar:
        for path in sorted(Path(staging).iterdir()):
            if path.name not in drop:
                tar.add(path, arcname=path.name)
    return Path(destination)
