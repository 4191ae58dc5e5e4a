"""WikiText (prepare/wikitext.py): WikiText-2 from ../shared/data prepared for real and
checked against counts made here from its token files; the archive path on a tiny zip with
the real layout (download through a file:// URL, cache, checksum, offline message, corrupt
archives), --raw-dir, --train-lines, stamps and the command line."""

import collections
import dataclasses
import hashlib
import socket
import subprocess
import sys
import zipfile
from shutil import copytree

import pytest
from conftest import REPO, shared_data

from fairseq_layernorm_plugins import cli
from fairseq_layernorm_plugins.prepare import fetch, wikitext
from fairseq_layernorm_plugins.prepare.textio import DataError

FILES = ("wiki.train.tokens", "wiki.valid.tokens", "wiki.test.tokens")
TINY = {
    "wiki.train.tokens": " \n = Tiny = \n \n The cat sat on the <unk> . \n A dog , the cat and a bird . \n \n",
    "wiki.valid.tokens": " \n = Valid = \n \n The bird sat on a cat . \n",
    "wiki.test.tokens": " \n = Test = \n \n A zebra sat . \n",
}


def text_counts(path):
    """(lines, tokens with one end-of-line per line, word types) of a token file, read here."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")[:-1]
    words = collections.Counter(word for line in lines for word in line.split())
    return len(lines), sum(words.values()) + len(lines), words


def binarised(bin_dir, split):
    """fairseq's own view of a binarised split: (dictionary, dataset), as --task language_modeling loads it."""
    from fairseq.data import Dictionary, data_utils

    dictionary = Dictionary.load(str(bin_dir / "dict.txt"))
    return dictionary, data_utils.load_indexed_dataset(str(bin_dir / split), dictionary)


def fairseq_dictionary_size(train_words):
    """fairseq-preprocess's dictionary for these train words: <s>, <pad>, </s>, <unk> and
    every other word, padded to a multiple of 8 (its --padding-factor)."""
    n = 4 + len(set(train_words) - {"<unk>"})
    return -(-n // 8) * 8


def closed_port_url():
    """A base URL on a loopback port that nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def make_zip(path, folder="wikitext-2", files=TINY, skip=()):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{folder}/", "")
        for name, text in files.items():
            if name not in skip:
                zf.writestr(f"{folder}/{name}", text)
    return path


@pytest.fixture
def tiny_zip(tmp_path):
    """A small wikitext-2-v1.zip with the real archive's layout (wikitext-2/wiki.*.tokens)."""
    (tmp_path / "mirror").mkdir()
    return make_zip(tmp_path / "mirror" / "wikitext-2-v1.zip")


@pytest.fixture
def trusted(monkeypatch, tiny_zip):
    """Make the tiny archive (and its files) the published WikiText-2."""
    digests = {name: ("sha256", hashlib.sha256(text.encode()).hexdigest()) for name, text in TINY.items()}
    fake = dataclasses.replace(
        wikitext.CORPORA["wikitext2"], sha256=hashlib.sha256(tiny_zip.read_bytes()).hexdigest(), files=digests
    )
    monkeypatch.setitem(wikitext.CORPORA, "wikitext2", fake)
    return fake


def test_wikitext2_from_shared_data_is_fairseqs_word_level_data(tmp_path, monkeypatch):
    raw = shared_data("wikitext2")
    out = tmp_path / "wikitext-2"
    stamp = wikitext.prepare(out, "wikitext2", raw_dir=raw)

    counts = {split: text_counts(raw / f"wiki.{split}.tokens") for split in ("train", "valid", "test")}
    assert {split: c[0] for split, c in counts.items()} == {"train": 36718, "valid": 3760, "test": 4358}
    assert {split: c[1] for split, c in counts.items()} == {"train": 2088628, "valid": 217646, "test": 245569}
    train_words = counts["train"][2]
    assert len(train_words) + 1 == 33278  # the paper's vocabulary: train's words (<unk> among them) and <eos>
    assert stamp["sizes"] == {split: c[0] for split, c in counts.items()}
    assert stamp["tokens"] == {split: c[1] for split, c in counts.items()}

    for split, (lines, tokens, _) in counts.items():
        dictionary, dataset = binarised(out / "bin", split)
        assert len(dataset) == lines and int(dataset.sizes.sum()) == tokens, split
    assert len(dictionary) == fairseq_dictionary_size(train_words) == 33280 == stamp["dictionary"]
    assert {dictionary[i] for i in range(dictionary.nspecial, len(dictionary))} == set(train_words) - {"<unk>"}
    assert dictionary.unk() not in dataset[len(dataset) - 1]  # WikiText is closed-vocabulary: nothing new in test
    with open(raw / "wiki.valid.tokens", encoding="utf-8") as f:
        first = [line.split() for line in f.read().split("\n")[:20]]
    _, valid = binarised(out / "bin", "valid")
    assert [dictionary.string(valid[i][:-1]).split() for i in range(20)] == first
    assert (out / "train.tokens").read_bytes() == (raw / "wiki.train.tokens").read_bytes()

    def no_rebuild(*args):
        raise AssertionError("an up-to-date directory was rebuilt")

    monkeypatch.setattr(wikitext, "binarise", no_rebuild)
    mtime = (out / "bin" / "train.bin").stat().st_mtime_ns
    assert wikitext.prepare(out, "wikitext2", raw_dir=raw) == stamp
    assert (out / "bin" / "train.bin").stat().st_mtime_ns == mtime
    assert not (tmp_path / "wikitext-2.work").exists()


def test_download_caches_binarises_and_a_second_run_is_a_no_op(tmp_path, tiny_zip, trusted, monkeypatch):
    cache, out = tmp_path / "downloads", tmp_path / "data" / "wikitext-2"
    stamp = wikitext.prepare(out, "wikitext2", download_dir=cache, url=tiny_zip.as_uri())
    assert (cache / "wikitext" / "wikitext-2-v1.zip").read_bytes() == tiny_zip.read_bytes()
    known = set(TINY["wiki.train.tokens"].split())  # the dictionary is train's: other words become <unk>
    for split in ("train", "valid", "test"):
        (tmp_path / "check.tokens").write_text(TINY[f"wiki.{split}.tokens"])
        lines, tokens, words = text_counts(tmp_path / "check.tokens")
        assert (stamp["sizes"][split], stamp["tokens"][split]) == (lines, tokens)
        dictionary, dataset = binarised(out / "bin", split)
        assert len(dataset) == lines and int(dataset.sizes.sum()) == tokens
        text = [
            [w if w in known else "<unk>" for w in line.split()]
            for line in TINY[f"wiki.{split}.tokens"].split("\n")[:-1]
        ]
        assert [dictionary.string(dataset[i][:-1]).split() for i in range(lines)] == text
        if split == "train":
            assert len(dictionary) == fairseq_dictionary_size(words) == stamp["dictionary"]
    assert stamp["source"] == "wikitext-2-v1.zip" and stamp["train_lines"] is None
    assert not (out.parent / "wikitext-2.work").exists()

    monkeypatch.setattr(wikitext, "binarise", lambda *a: pytest.fail("rebuilt an up-to-date directory"))
    again = wikitext.prepare(out, "wikitext2", download_dir=cache, url=closed_port_url() + "/wikitext-2-v1.zip")
    assert again == stamp  # from the cache, nothing downloaded or built


def test_train_lines_keeps_the_first_lines_and_force_rebuilds(tmp_path, tiny_zip, trusted, monkeypatch):
    out = tmp_path / "wt2-3"
    stamp = wikitext.prepare(out, "wikitext2", archive=tiny_zip, train_lines=3)
    assert stamp["sizes"] == {"train": 3, "valid": 4, "test": 4} and stamp["train_lines"] == 3
    assert (out / "train.tokens").read_text() == "".join(TINY["wiki.train.tokens"].splitlines(keepends=True)[:3])
    _, train = binarised(out / "bin", "train")
    assert len(train) == 3
    full = wikitext.prepare(out, "wikitext2", archive=tiny_zip)  # other options: rebuilt
    assert full["sizes"]["train"] == 6
    calls = []  # a stand-in for fairseq-preprocess (the real one ran above): copies the data-bin it made
    monkeypatch.setattr(
        wikitext, "binarise", lambda text, bin, workers: calls.append(bin) or copytree(out / "bin", bin)
    )
    assert wikitext.prepare(out, "wikitext2", archive=tiny_zip) == full and not calls  # up to date
    assert wikitext.prepare(out, "wikitext2", archive=tiny_zip, force=True) == full and len(calls) == 1


def test_a_wrong_archive_is_refused_in_one_line_and_not_kept(tmp_path, tiny_zip, monkeypatch):
    monkeypatch.setattr(fetch.time, "sleep", lambda seconds: None)
    cache = tmp_path / "downloads"
    expected = wikitext.CORPORA["wikitext2"].sha256
    with pytest.raises(DataError) as err:
        wikitext.fetch_archive("wikitext2", download_dir=cache, url=tiny_zip.as_uri(), retries=2, wait=0)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{tiny_zip.as_uri()}: download failed after 2 attempts")
    assert f"sha256 {hashlib.sha256(tiny_zip.read_bytes()).hexdigest()} is not the expected {expected}" in message
    assert not list((cache / "wikitext").iterdir())  # no .part, no wrong archive in the cache

    with pytest.raises(DataError, match=rf"^{tiny_zip}: sha256 \w+ is not the expected {expected} "):
        wikitext.prepare(tmp_path / "out", "wikitext2", archive=tiny_zip)
    assert not (tmp_path / "out").exists()


def test_offline_is_one_line_naming_the_url_and_where_to_put_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(wikitext, "SHARED_RAW", tmp_path / "no-shared")  # a user's machine: no ../shared/data
    monkeypatch.setattr(fetch.time, "sleep", lambda seconds: None)
    base = closed_port_url()
    monkeypatch.setattr(wikitext, "BASE_URL", base)
    out = tmp_path / "data" / "wikitext-103"
    with pytest.raises(SystemExit) as exit_:
        wikitext.command("wikitext103", ["--download-dir", str(tmp_path / "downloads"), "--out", str(out)])
    assert exit_.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert errors[0].startswith(f"error: {base}/wikitext-103-v1.zip: download failed after 3 attempts")
    assert errors[0].endswith(
        f"fetch it yourself to {tmp_path / 'downloads' / 'wikitext' / 'wikitext-103-v1.zip'} "
        "or pass --raw-dir DIR holding wiki.train.tokens, wiki.valid.tokens, wiki.test.tokens"
    )
    assert not out.exists()


def test_corrupt_or_incomplete_archives_are_one_line_errors(tmp_path):
    incomplete = make_zip(tmp_path / "incomplete.zip", skip=("wiki.test.tokens",))
    with pytest.raises(DataError, match=r"incomplete\.zip: missing wikitext-2/wiki\.test\.tokens$"):
        wikitext.unzip(incomplete, "wikitext-2", tmp_path)
    wrong_folder = make_zip(tmp_path / "wt103.zip", folder="wikitext-103")
    with pytest.raises(DataError, match=r"wt103\.zip: missing wikitext-2/wiki\.train\.tokens, "):
        wikitext.unzip(wrong_folder, "wikitext-2", tmp_path)
    good = make_zip(tmp_path / "good.zip", files={name: text * 200 for name, text in TINY.items()})
    truncated = tmp_path / "truncated.zip"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(DataError, match=r"truncated\.zip: corrupt or truncated archive \("):
        wikitext.unzip(truncated, "wikitext-2", tmp_path)


def test_raw_dir_must_hold_the_published_files(tmp_path, trusted):
    folder = tmp_path / "unpacked" / "wikitext-2"  # an unpacked archive: its folder is found
    folder.mkdir(parents=True)
    for name, text in TINY.items():
        (folder / name).write_text(text)
    assert wikitext.raw_files("wikitext2", tmp_path / "unpacked") == {name: folder / name for name in FILES}
    (folder / "wiki.valid.tokens").write_text("another version\n")
    with pytest.raises(DataError, match=r"wiki\.valid\.tokens: sha256 \w+ is not the expected \w+ \(corrupt"):
        wikitext.raw_files("wikitext2", folder)
    with pytest.raises(DataError, match=r"wiki\.train\.tokens: sha1 \w+ is not the expected b7497e2d"):
        wikitext.raw_files("wikitext103", folder)  # WikiText-103's files: gluon-nlp's SHA-1
    (folder / "wiki.test.tokens").unlink()
    with pytest.raises(DataError, match=r"wiki\.test\.tokens: file not found \(--raw-dir must hold wiki\.train"):
        wikitext.raw_files("wikitext2", folder)


def test_a_failed_binarisation_leaves_no_output(tmp_path, tiny_zip, trusted, monkeypatch):
    def broken(*args):
        raise RuntimeError("fairseq-preprocess failed")

    monkeypatch.setattr(wikitext, "binarise", broken)
    with pytest.raises(RuntimeError):
        wikitext.prepare(tmp_path / "out", "wikitext2", archive=tiny_zip)
    # no output and nothing half-written; the finished steps stay in out.work/ (a rerun resumes); no out.lock
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mirror", "out.work"]
    assert sorted(p.name for p in (tmp_path / "out.work").iterdir()) == ["unpack.wikitext-2-v1.zip"]


def test_the_commands_reach_the_wikitext_module(tmp_path, capsys):
    for corpus in ("wikitext103", "wikitext2"):
        with pytest.raises(SystemExit) as exit_:
            cli.prepare([corpus, "--help"])
        assert exit_.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: fairseq-ln-prepare {corpus}")
    proc = subprocess.run(
        [sys.executable, REPO / "scripts" / "prepare_wikitext.py", "wikitext103", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("usage: prepare_wikitext.py wikitext103")
    assert "--train-lines N" in proc.stdout and "wikitext-103-v1.zip" in proc.stdout
