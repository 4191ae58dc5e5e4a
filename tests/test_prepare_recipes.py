"""The IWSLT14 and WMT14 pipelines end to end on standard-shaped inputs built from real
segments in ../shared/data: layout, sizes, resumability, and bad inputs (one-line
error, no output directory)."""

import re
import shutil
import subprocess
import sys
import tarfile
import time

import pytest
from conftest import PLUGIN_DIR, REPO, TINY_MODEL, json_records, run_cli, shared_data
from helpers.corpora import build_iwslt14_archive, xml_to_train_tags

from fairseq_layernorm_plugins.prepare import iwslt14, wmt14, wmt14_mini
from fairseq_layernorm_plugins.prepare.moses import xml_segments
from fairseq_layernorm_plugins.prepare.steps import exclusive
from fairseq_layernorm_plugins.prepare.textio import DataError, read_lines


@pytest.fixture(scope="module")
def iwslt_archive(tmp_path_factory):
    return build_iwslt14_archive(shared_data("iwslt14", "orig_de-en"), tmp_path_factory.mktemp("archive") / "de-en.tgz")


SMALL_SEGMENTS = 120  # per xml file: a tenth of the smallest


@pytest.fixture(scope="module")
def small_iwslt_archive(tmp_path_factory):
    """The same archive (every member, every talk's header lines) with only the first
    SMALL_SEGMENTS <seg>s of each xml file, for the tests of when the steps run, which do not
    depend on the corpus's size (the full one's sizes and contents:
    test_iwslt14_archive_to_data_bin_that_fairseq_trains_on)."""
    orig, small = shared_data("iwslt14", "orig_de-en"), tmp_path_factory.mktemp("small_orig")
    for xml in orig.glob("*.xml"):
        segments, kept = 0, []
        for line in xml.read_text(encoding="utf-8").splitlines():
            segments += "<seg id" in line
            if "<seg id" not in line or segments <= SMALL_SEGMENTS:
                kept.append(line)
        (small / xml.name).write_text("\n".join(kept) + "\n", encoding="utf-8")
    return build_iwslt14_archive(small, tmp_path_factory.mktemp("small_archive") / "de-en.tgz")


def test_iwslt14_archive_to_data_bin_that_fairseq_trains_on(iwslt_archive, tmp_path):
    out = tmp_path / "iwslt14"
    stamp = iwslt14.prepare(out, archive=iwslt_archive, merges=1000)
    fairseq_tmp = shared_data("iwslt14", "fairseq_iwslt14.tokenized.de-en", "tmp")
    # train.tags made of tst2010 + tst2011 (2998 segments + 2 x 5 header lines per talk)
    n_text = sum(
        len(xml_to_train_tags(shared_data("iwslt14", "orig_de-en", f"IWSLT14.TED.{s}.de-en.de.xml")))
        for s in ("tst2010", "tst2011")
    )
    n_talks = (n_text - 1565 - 1433) // 5
    cleaned = stamp["sizes"]["train"] + stamp["sizes"]["valid"]
    assert (
        0.9 * (n_text - 3 * n_talks) <= cleaned <= n_text - 3 * n_talks
    )  # url/keywords/talkid dropped; clean-corpus drops a few
    assert stamp["sizes"]["valid"] == cleaned // 23 and stamp["sizes"]["test"] == 6750
    assert read_lines(out / "test.tok.en") == read_lines(fairseq_tmp / "test.en")
    raw = [
        line
        for s in iwslt14.TEST_SETS
        for line in xml_segments(read_lines(shared_data("iwslt14", "orig_de-en", f"{s}.de-en.de.xml")))
    ]
    assert read_lines(out / "test.raw.de") == raw
    assert read_lines(out / "code")[0].startswith("#version") and len(read_lines(out / "code")) <= 1001
    assert not (tmp_path / "iwslt14.work").exists()  # intermediate steps are removed on success

    log = run_cli(
        "fairseq-train",
        out / "bin",
        "--user-dir",
        PLUGIN_DIR,
        "--arch",
        "transformer_preln",
        *TINY_MODEL,
        "--optimizer",
        "adam",
        "--lr",
        "1e-3",
        "--max-tokens",
        "1000",
        "--max-update",
        "3",
        "--cpu",
        "--save-dir",
        tmp_path / "ckpt",
        "--no-save",
        "--no-progress-bar",
        "--log-format",
        "json",
        "--log-interval",
        "1",
        in_process=True,  # fairseq-train's cli_main: the data-bin is what is tested
    )
    assert len(json_records(log, "train_inner")) == 3
    assert float(json_records(log, "valid")[-1]["valid_loss"]) > 0  # the valid split binarised and loads too


def test_interrupted_run_resumes_and_force_redoes(small_iwslt_archive, tmp_path, monkeypatch):
    out = tmp_path / "iwslt14"

    def interrupted(*args):
        raise KeyboardInterrupt

    real_bpe, real_tokenize = iwslt14.apply_bpe, iwslt14.tokenize
    monkeypatch.setattr(iwslt14, "apply_bpe", interrupted)
    with pytest.raises(KeyboardInterrupt):
        iwslt14.prepare(out, archive=small_iwslt_archive, merges=500)
    assert not out.exists()
    work = tmp_path / "iwslt14.work"
    assert sorted(p.name for p in work.iterdir() if not p.name.startswith(".")) == ["tokenize.de-en", "unpack"]

    calls = []
    monkeypatch.setattr(iwslt14, "apply_bpe", real_bpe)
    monkeypatch.setattr(iwslt14, "tokenize", lambda *a: calls.append("tokenize") or real_tokenize(*a))
    first = iwslt14.prepare(out, archive=small_iwslt_archive, merges=500, keep_work=True)
    assert calls == []  # the finished tokenisation step was not redone
    again = iwslt14.prepare(out, archive=small_iwslt_archive, merges=500, keep_work=True)
    assert calls == [] and again == first
    iwslt14.prepare(out, archive=small_iwslt_archive, merges=500, force=True)
    assert calls == ["tokenize"]


def test_an_up_to_date_directory_builds_nothing_although_its_work_dir_is_gone(
    small_iwslt_archive, tmp_path, monkeypatch
):
    """Every claims.py / main_job.py call prepares its data again: with the work directory
    removed after the first preparation, the steps' keys alone must tell that the output
    is current, and a changed option must still rebuild."""
    out, work = tmp_path / "iwslt14", tmp_path / "iwslt14.work"
    built = []
    for name in ("extract", "tokenize", "apply_bpe"):
        real = getattr(iwslt14, name)
        monkeypatch.setattr(iwslt14, name, lambda *a, _name=name, _real=real: built.append(_name) or _real(*a))
    first = iwslt14.prepare(out, archive=small_iwslt_archive, merges=500)
    assert built == ["extract", "tokenize", "apply_bpe"] and not work.exists()

    built.clear()
    assert iwslt14.prepare(out, archive=small_iwslt_archive, merges=500) == first
    assert built == [] and not work.exists()

    changed = iwslt14.prepare(out, archive=small_iwslt_archive, merges=400)
    assert built == ["extract", "tokenize", "apply_bpe"] and changed["merges"] == 400 != first["merges"]


def test_a_second_process_preparing_the_same_directory_waits_for_the_first(small_iwslt_archive, tmp_path):
    """Two commands started together (two claims.py seeds) once raced over OUT.work and one
    crashed; now the later waits on OUT.lock and then finds what it needs."""
    out = tmp_path / "iwslt14"
    script = (
        "import logging, sys; logging.basicConfig(level=logging.INFO)\n"
        "from fairseq_layernorm_plugins.prepare import iwslt14\n"
        "iwslt14.prepare(sys.argv[1], archive=sys.argv[2], merges=500)"
    )
    with exclusive(tmp_path / "iwslt14.lock"):  # this process is "the first"
        with exclusive(tmp_path / "iwslt14.lock"):  # re-entrant: nested preparations share the lock
            pass
        child = subprocess.Popen(
            [sys.executable, "-c", script, str(out), str(small_iwslt_archive)], stderr=subprocess.PIPE, text=True
        )
        waiting = child.stderr.readline()
        assert "another process is preparing this data; waiting for it" in waiting, waiting
        time.sleep(1)
        assert child.poll() is None and not out.exists()  # blocked until the lock is released
    _, err = child.communicate(timeout=600)
    assert child.returncode == 0, err
    assert (out / "stamp.json").is_file()


def _raw_dir(tmp_path, iwslt_archive):
    with tarfile.open(iwslt_archive) as tar:
        tar.extractall(tmp_path / "raw", filter="data")
    return tmp_path / "raw" / "de-en"


def _misaligned(raw):
    path = raw / "IWSLT14.TED.tst2011.de-en.en.xml"
    lines = path.read_text(encoding="utf-8").splitlines()
    i = next(i for i, line in enumerate(lines) if "<seg id" in line)
    path.write_text("\n".join(lines[:i] + lines[i + 1 :]) + "\n", encoding="utf-8")
    return r"IWSLT14\.TED\.tst2011\.de-en\.de\.xml has 1433 <seg>s but .*tst2011\.de-en\.en\.xml has 1432: not aligned"


def _misaligned_train(raw):
    with open(raw / "train.tags.de-en.en", "a", encoding="utf-8") as f:
        f.write("one more line\n")
    return r"train\.tags\.de-en\.de has \d+ text lines but .*train\.tags\.de-en\.en has \d+: not aligned"


def _bad_utf8(raw):
    path = raw / "train.tags.de-en.de"
    lines = path.read_bytes().split(b"\n")
    lines[41] = b"Stra\xdfe"  # Latin-1, not UTF-8
    path.write_bytes(b"\n".join(lines))
    return r"train\.tags\.de-en\.de:42: invalid UTF-8"


def _blank(raw):
    (raw / "IWSLT14.TED.dev2010.de-en.de.xml").write_text("\n \n")
    return r"IWSLT14\.TED\.dev2010\.de-en\.de\.xml: empty or all-blank file"


def _missing(raw):
    (raw / "train.tags.de-en.en").unlink()
    return r"de-en: missing train\.tags\.de-en\.en"


@pytest.mark.parametrize("damage", [_misaligned, _misaligned_train, _bad_utf8, _blank, _missing])
def test_bad_raw_input_is_one_line_error_and_no_output(damage, iwslt_archive, tmp_path, capsys):
    raw = _raw_dir(tmp_path, iwslt_archive)
    expected = damage(raw)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit:
        iwslt14.main(["--raw-dir", str(raw), "--out", str(out), "--merges", "200"])
    assert exit.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) >= 1 and err[-1].startswith("error: ")
    assert re.search(expected, err[-1]), err[-1]
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]  # no temp dirs, no out.work (empty), no out.lock


def test_bad_archives(iwslt_archive, tmp_path):
    incomplete = build_iwslt14_archive(
        shared_data("iwslt14", "orig_de-en"), tmp_path / "incomplete.tgz", drop=["IWSLT14.TED.tst2012.de-en.en.xml"]
    )
    truncated = tmp_path / "truncated.tgz"
    truncated.write_bytes(iwslt_archive.read_bytes()[:50_000])
    for archive, message in (
        (incomplete, r"incomplete\.tgz: missing de-en/IWSLT14\.TED\.tst2012\.de-en\.en\.xml"),
        (truncated, r"truncated\.tgz: corrupt or truncated archive"),
        (tmp_path / "absent.tgz", r"absent\.tgz: file not found"),
    ):
        with pytest.raises(DataError, match=message):
            iwslt14.prepare(tmp_path / "out", archive=archive)
        assert not (tmp_path / "out").exists()


def _wmt_archives(root, shared, archives=wmt14.ARCHIVES, extra_pairs=(), held_out=None):
    """The five statmt.org archives, shaped like the real ones, from real WMT text: each
    training corpus a 600-line slice of other news test sets (raw; ``extra_pairs`` (en, de)
    appended to the first), the real newstest2013 and the real newstest2014 full sgm (their
    first ``held_out`` segments only, if given)."""
    root.mkdir()
    news = shared / "wmt_news_other" / "de-en"
    slices = dict(zip(archives, ("newstest2010", "newstest2011", "newstest2012")))
    for i, (name, (_url, prefix)) in enumerate(archives.items()):
        with tarfile.open(root / name, "w:gz") as tar:
            for side, lang in enumerate(("en", "de")):
                tmp = root / f"{slices[name]}.{lang}"
                lines = read_lines(news / f"{slices[name]}.{lang}")[:600] + [p[side] for p in extra_pairs if i == 0]
                tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
                tar.add(tmp, arcname=f"{prefix}.{lang}")
    with tarfile.open(root / "dev.tgz", "w:gz") as tar:
        for lang in ("en", "de"):
            dev = shared / "wmt14" / "plain" / f"newstest2013.{lang}"
            if held_out:
                dev = root / f"newstest2013.{lang}"
                dev.write_text("\n".join(read_lines(shared / "wmt14" / "plain" / dev.name)[:held_out]) + "\n")
            tar.add(dev, arcname=f"dev/newstest2013.{lang}")
    with tarfile.open(root / "test-full.tgz", "w:gz") as tar:
        for f in (shared / "wmt14" / "test-full").iterdir():
            if held_out:
                lines, kept = f.read_text(encoding="utf-8").splitlines(), 0
                short = []
                for line in lines:
                    kept += "<seg id" in line
                    if "<seg id" not in line or kept <= held_out:
                        short.append(line)
                (root / f.name).write_text("\n".join(short) + "\n", encoding="utf-8")
                f = root / f.name
            tar.add(f, arcname=f"test-full/{f.name}")
    return root


@pytest.mark.parametrize("segmentation", ["bpe", "sentencepiece"])
def test_wmt14_from_archives_valid_is_newstest2013_test_is_newstest2014(segmentation, tmp_path):
    shared = shared_data()
    archives = _wmt_archives(tmp_path / "archives", shared)
    out = tmp_path / "wmt14"
    stamp = wmt14.prepare(
        out, archive_dir=archives, merges=1000, sentencepiece=2000 if segmentation == "sentencepiece" else None
    )
    assert stamp["sizes"]["valid"] == 3000 and stamp["sizes"]["test"] == 3003
    assert 0.8 * 1800 < stamp["sizes"]["train"] <= 1800  # clean-corpus (1..250, ratio 1.5) drops a few
    assert read_lines(out / "valid.raw.de") == read_lines(shared / "wmt14" / "plain" / "newstest2013.de")
    assert read_lines(out / "test.raw.de") == read_lines(shared / "wmt14" / "plain" / "newstest2014.de")
    assert read_lines(out / "test.raw.en") == xml_segments(
        read_lines(shared / "wmt14" / "test-full" / "newstest2014-deen-src.en.sgm")
    )
    assert (out / "bin" / "dict.en.txt").read_text() == (out / "bin" / "dict.de.txt").read_text()  # joined dictionary
    first_test = read_lines(out / "test.en")[0]
    # Moses-tokenised references for tokenised BLEU, whatever the segmentation
    assert read_lines(out / "test.tok.en")[0] == "Gutach : Increased safety for pedestrians"
    assert sum(" @-@ " in line for line in read_lines(out / "test.tok.de")) > 100  # aggressive hyphen splitting
    if segmentation == "bpe":
        assert "@@" in " ".join(read_lines(out / "train.en")) and (out / "code").is_file()
    else:
        assert first_test.startswith("▁") and (out / "spm.model").is_file()
    shutil.rmtree(archives)


@pytest.mark.slow(1.5)
def test_wmt14_mini_from_shared_data(tmp_path):
    shared = shared_data()
    stamp = wmt14_mini.prepare(tmp_path / "mini", shared, merges=2000, train_pairs=5000)
    assert stamp["sizes"] == {"train": 5000, "valid": 3000, "test": 3003}
    assert read_lines(tmp_path / "mini" / "valid.raw.en") == read_lines(shared / "wmt14" / "plain" / "newstest2013.en")
    held_out = set(read_lines(tmp_path / "mini" / "test.tok.en")) | set(read_lines(tmp_path / "mini" / "valid.raw.en"))
    train = set(read_lines(tmp_path / "mini" / "train.en"))
    assert len(held_out & train) < 5  # newstest2013/2014 are not in training
    # the detokenised OpenNMT sample went through normalise + tokenise like the rest
    assert all("&amp;apos;" not in line for line in train)


def test_wmt14_as_admin_prepares_as_transformer_clinic(tmp_path):
    """fairseq-ln-prepare wmt14 --as admin = Transformer-Clinic pre-process/wmt14en-de.sh: NC v12,
    valid normalised before tokenising, clean-corpus-n 1 80 (ratio 9) on tokens before BPE,
    32764 merges, no further test sets."""
    from fairseq_layernorm_plugins.prepare.moses import NormalizePunctuation, Tokenize

    shared = shared_data()
    long_pair = (" ".join(["word"] * 85), " ".join(["Wort"] * 85))  # 85 tokens: dropped before BPE
    uneven = (" ".join(["one"] * 5), " ".join(["eins"] * 20))  # ratio 4: kept at ratio 9 (fairseq's 1.5 drops it)
    archives = _wmt_archives(tmp_path / "archives", shared, wmt14.ADMIN_ARCHIVES, [long_pair, uneven], held_out=300)
    assert "training-parallel-nc-v12.tgz" in {p.name for p in archives.iterdir()}
    out = tmp_path / "admin"
    stamp = wmt14.main(["--as", "admin", "--archive-dir", str(archives), "--out", str(out), "--merges", "500"])
    assert stamp["setup"] == "admin" and stamp["clean"] == [1, 80, 9] and stamp["merges"] == 500
    assert stamp["test_sets"] == {"newstest2014": "test"} and (stamp["sizes"]["valid"], stamp["sizes"]["test"]) == (
        300,
        300,
    )
    train = [
        (line.replace("@@ ", ""), other.replace("@@ ", ""))
        for line, other in zip(read_lines(out / "train.en"), read_lines(out / "train.de"))
    ]
    assert all(1 <= len(s.split()) <= 80 and 1 <= len(t.split()) <= 80 for s, t in train)
    assert long_pair not in train and uneven in train
    raw_train = [
        (NormalizePunctuation("en")(line), NormalizePunctuation("de")(other))
        for name in ("newstest2010", "newstest2011", "newstest2012")
        for line, other in zip(
            *(read_lines(shared / "wmt_news_other" / "de-en" / f"{name}.{lang}")[:600] for lang in ("en", "de"))
        )
    ]
    tokenized = [(Tokenize("en", True)(s), Tokenize("de", True)(t)) for s, t in raw_train]
    assert len(train) == sum(1 <= len(s.split()) <= 80 and 1 <= len(t.split()) <= 80 for s, t in tokenized) + 1
    valid_de = read_lines(shared / "wmt14" / "plain" / "newstest2013.de")[:300]
    normalised = [Tokenize("de", True)(NormalizePunctuation("de")(line)) for line in valid_de]
    # (on newstest2013 it equals fairseq's treatment, straight_apostrophe + tokenise, line for line)
    assert [line.replace("@@ ", "") for line in read_lines(out / "valid.de")] == normalised
    assert read_lines(out / "code")[0].startswith("#version")


def test_wmt14_as_admin_defaults(monkeypatch, tmp_path):
    """Without --merges / --out / --extra-tests: Admin's 32764 merges, data/wmt14.en-de.admin,
    no further test sets; the default preparation keeps fairseq's 32000 and the B2T test sets."""
    calls = []
    monkeypatch.setattr(wmt14, "prepare", lambda **kw: calls.append(kw) or {"sizes": {}})
    wmt14.main(["--as", "admin"])
    wmt14.main([])
    admin, default = calls
    assert (admin["setup"], admin["out_dir"], admin["extra_tests"]) == ("admin", REPO / "data/wmt14.en-de.admin", [])
    assert wmt14.SETUPS[admin["setup"]].merges == 32764 and admin["merges"] is None  # prepare() takes the setup's
    assert (default["setup"], default["out_dir"], default["extra_tests"]) == (
        "fairseq",
        REPO / "data/wmt14.en-de",
        list(wmt14.EXTRA_TESTS),
    )
    assert wmt14.SETUPS["fairseq"].merges == 32000
