"""The text steps of the recipes, line by line (Moses, clean-corpus, BPE, subsampling),
and fetching archives (download code run against local files)."""

import io
import tarfile

import pytest
from conftest import shared_data

from fairseq_layernorm_plugins.prepare.dataset import subsample
from fairseq_layernorm_plugins.prepare.fetch import download, extract
from fairseq_layernorm_plugins.prepare.iwslt14 import build_test_split
from fairseq_layernorm_plugins.prepare.moses import (
    CleanCorpus,
    NormalizePunctuation,
    Tokenize,
    strip_train_tags,
    xml_segments,
)
from fairseq_layernorm_plugins.prepare.parallel import Compose, map_lines
from fairseq_layernorm_plugins.prepare.subwords import ApplyBPE
from fairseq_layernorm_plugins.prepare.textio import DataError, read_lines


def test_iwslt14_test_set_equals_fairseq_line_for_line():
    """From the official xml: tokenised + lowercased test == fairseq's tmp/test.*, and the
    shipped BPE codes applied to it == fairseq's test.* (the number of differing lines
    is the message on failure)."""
    iwslt = shared_data("iwslt14")
    fairseq_dir = iwslt / "fairseq_iwslt14.tokenized.de-en"
    tokenised, _ = build_test_split(iwslt / "orig_de-en", "de", "en", workers=2)
    bpe = ApplyBPE(fairseq_dir / "code")
    for side, lang in enumerate(("de", "en")):
        ours = [pair[side] for pair in tokenised]
        theirs = read_lines(fairseq_dir / "tmp" / f"test.{lang}")
        assert len(ours) == len(theirs) == 6750
        differing = sum(a != b for a, b in zip(ours, theirs))
        assert differing == 0, f"{differing} of 6750 tokenised test.{lang} lines differ from fairseq's"
        segmented = map_lines(bpe, ours, workers=2)
        differing = sum(a != b for a, b in zip(segmented, read_lines(fairseq_dir / f"test.{lang}")))
        assert differing == 0, f"{differing} of 6750 BPE test.{lang} lines differ from fairseq's"


@pytest.mark.parametrize(
    "lang, text, expected",
    [
        # tokenizer.perl splits the period off the last word even after a non-breaking prefix
        ("en", "those are all the roads in the U.S.", "those are all the roads in the U.S ."),
        ("de", "wie in den vorhergegangenen 75.", "wie in den vorhergegangenen 75 ."),
        ("en", "Mr. Smith isn't here.", "Mr. Smith isn &apos;t here ."),
        ("en", 'a "so-called" test | x', "a &quot; so-called &quot; test &#124; x"),
    ],
)
def test_moses_tokenizer_matches_perl(lang, text, expected):
    assert Tokenize(lang)(text) == expected


def test_aggressive_hyphen_splitting_and_normalisation():
    assert Tokenize("en", aggressive_dash_splits=True)("a so-called test") == "a so @-@ called test"
    # normalize-punctuation then remove-non-printing-char (control chars become spaces)
    normalise = NormalizePunctuation("en")
    assert normalise("„Hallo“ sagte er\u200b,  ok") == '"Hallo" sagte er , ok'  # zero-width space is \p{C}
    assert normalise("a\u0007b") == "a b"
    assert normalise("Hello  world") == "Hello world"


def test_train_tag_lines_and_xml_segments():
    assert strip_train_tags("<url>http://www.ted.com/talks/x.html</url>") is None
    assert strip_train_tags("<talkid>1</talkid>") is None
    assert strip_train_tags("<keywords>talks, science</keywords>") is None
    assert strip_train_tags("<title>Wade Davis: Kulturen</title>") == "Wade Davis: Kulturen"
    assert strip_train_tags("<description>Mit Fotos</description>") == "Mit Fotos"
    assert xml_segments(['<doc docid="1">', '<seg id="12"> Hallo Welt. </seg>', "<title>x</title>"]) == ["Hallo Welt."]


def test_clean_corpus_rules():
    clean = CleanCorpus(min_len=1, max_len=5, ratio=1.5)
    assert clean(("  a   b ", "c d")) == ("a b", "c d")  # whitespace squeezed
    assert clean(("a|b c", "d e")) == ("ab c", "d e")  # "|" removed, as the Perl script does
    assert clean(("", "x")) is None and clean(("x", "   ")) is None
    assert clean(("a b c d e f", "a b c d e f")) is None  # over max_len
    assert clean(("a b c", "d e")) == ("a b c", "d e")  # ratio exactly 1.5 is kept
    assert clean(("a b c d", "e f")) is None  # ratio 2
    assert clean(("e f", "a b c d")) is None


def test_map_lines_keeps_order_and_drops_with_none():
    lines = [f"line {i}" for i in range(5003)]
    assert map_lines(str.upper, lines, workers=2, chunk_size=1000) == [line.upper() for line in lines]
    keep_even = Compose(lambda s: s if int(s.split()[1]) % 2 == 0 else None, str.upper)
    assert [x for x in map_lines(keep_even, lines[:10], workers=1) if x] == [
        "LINE 0",
        "LINE 2",
        "LINE 4",
        "LINE 6",
        "LINE 8",
    ]


def test_subsample_is_deterministic_and_keeps_corpus_order():
    pairs = [(f"s{i}", f"t{i}") for i in range(1000)]
    a, b, c = subsample(pairs, 100, seed=1), subsample(pairs, 100, seed=1), subsample(pairs, 100, seed=2)
    assert a == b and a != c and len(a) == 100 and len(set(a)) == 100
    assert a == sorted(a, key=pairs.index)
    assert subsample(pairs, 5000) == pairs and subsample(pairs, None) == pairs


def test_download_from_url_with_retries(tmp_path):
    source = tmp_path / "remote.tgz"
    source.write_bytes(b"x" * 300_000)
    target = download(source.as_uri(), tmp_path / "downloads" / "de-en.tgz")
    assert target.read_bytes() == source.read_bytes()
    assert not list((tmp_path / "downloads").glob("*.part"))
    with pytest.raises(DataError, match=r"nothing\.tgz: download failed after 2 attempts"):
        download((tmp_path / "nothing.tgz").as_uri(), tmp_path / "downloads" / "nothing.tgz", retries=2, wait=0)
    assert not (tmp_path / "downloads" / "nothing.tgz").exists()


def _tar(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_extract_checks_members_and_integrity(tmp_path):
    archive = _tar(tmp_path / "a.tgz", {"de-en/train.de": b"hallo\n" * 2000, "de-en/train.en": b"hello\n" * 2000})
    extract(archive, tmp_path / "ok", ["de-en/train.de", "de-en/train.en"])
    assert (tmp_path / "ok" / "de-en" / "train.en").read_text().count("hello") == 2000
    with pytest.raises(DataError, match=r"a\.tgz: missing de-en/test\.en"):
        extract(archive, tmp_path / "missing", ["de-en/train.de", "de-en/test.en"])
    truncated = tmp_path / "truncated.tgz"
    truncated.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(DataError, match=r"truncated\.tgz: corrupt or truncated archive"):
        extract(truncated, tmp_path / "t", ["de-en/train.de"])
    corrupt = tmp_path / "corrupt.tgz"
    corrupt.write_bytes(b"\x1f\x8b" + bytes(range(256)) * 10)
    with pytest.raises(DataError, match=r"corrupt\.tgz: corrupt or truncated archive"):
        extract(corrupt, tmp_path / "c", ["de-en/train.de"])
