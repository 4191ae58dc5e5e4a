"""``fairseq-ln-prepare wmt14 --as b2t``: the B2T authors' data, fairseq's scaling_nmt on
Google's preprocessed ``wmt16_en_de.tar.gz``, run on an archive shaped like Google's (the
same flat member names, made as google/seq2seq's script makes them) from real WMT text in
../shared/data: the data-bin with a joined dictionary, the counts and references, a rerun
that does nothing, and bad archives (a checksum that is not the expected one, a corrupt,
incomplete or misaligned one, none at all) refused in one line with nothing written."""

import hashlib
import json
import re
import sys
import tarfile

import pytest
from conftest import REPO, shared_data
from helpers.corpora import build_google_wmt16_archive, tar_members
from test_evaluate import TINY_RECIPE, sacrebleu_cli
from test_prepare_safety import error_line, prepare_command, tree

from fairseq_layernorm_plugins import cli
from fairseq_layernorm_plugins.prepare import wmt14, wmt14_b2t
from fairseq_layernorm_plugins.prepare.fetch import extract
from fairseq_layernorm_plugins.prepare.textio import DataError, fairseq_preprocess, read_lines, write_lines
from fairseq_layernorm_plugins.recipes.config import list_recipes, load_recipe
from fairseq_layernorm_plugins.runs.evaluate import evaluate
from fairseq_layernorm_plugins.runs.launch import Launch, train

TEST_LINES = 200
SPLITS = {"test": "newstest2014", **{f"test{i}": name for i, name in enumerate(wmt14.EXTRA_TESTS, 1)}}


def md5(path):
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def google_archive(tmp_path_factory):
    """(folder holding wmt16_en_de.tar.gz, its MD5, the folder of its members)."""
    folder = tmp_path_factory.mktemp("google")
    members = build_google_wmt16_archive(shared_data(), folder / wmt14_b2t.ARCHIVE, test_lines=TEST_LINES)
    return folder, md5(folder / wmt14_b2t.ARCHIVE), members


@pytest.fixture(scope="module")
def prepared(google_archive, tmp_path_factory):
    """``fairseq-ln-prepare wmt14 --as b2t`` run on the archive: (the folder it ran in, its
    arguments, its stdout)."""
    folder, archive_md5, _ = google_archive
    cwd = tmp_path_factory.mktemp("prepared")
    args = ["wmt14", "--as", "b2t", "--archive-dir", folder, "--archive-md5", archive_md5, "--out", "out"]
    rc, stdout, stderr = prepare_command(*args, "--workers", 1, cwd=cwd)
    assert rc == 0, stderr[-3000:]
    return cwd, args, stdout


def test_the_archive_becomes_a_joined_data_bin_and_a_rerun_does_nothing(google_archive, prepared):
    _, archive_md5, members = google_archive
    tmp_path, args, stdout = prepared
    out = tmp_path / "out"
    train = read_lines(members / "train.tok.clean.bpe.32000.en")
    sizes = ", ".join(f"{split} {TEST_LINES}" for split in ("valid", *SPLITS))
    assert stdout.strip().splitlines()[-1] == (
        f"{out}: train {len(train)}, {sizes}; train on it: fairseq-ln-train RECIPE --data {out}"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no out.work, no out.lock
    stamp = json.loads((out / "stamp.json").read_text())
    assert stamp["test_sets"] == {name: split for split, name in SPLITS.items()}
    assert (stamp["setup"], stamp["nwords"], stamp["merges"], stamp["joined_dictionary"]) == ("b2t", 32768, 800, True)
    assert (stamp["archive_md5"], stamp["published_archive"]) == (archive_md5, False)
    # the archive's text, as it comes: segmented for fairseq, tokenised and raw beside it
    for lang in ("en", "de"):
        assert read_lines(out / f"train.{lang}") == read_lines(members / f"train.tok.clean.bpe.32000.{lang}")
        assert read_lines(out / f"valid.{lang}") == read_lines(members / f"newstest2013.tok.bpe.32000.{lang}")
        assert read_lines(out / f"valid.raw.{lang}") == read_lines(members / f"newstest2013.{lang}")
        for split, name in SPLITS.items():
            assert read_lines(out / f"{split}.{lang}") == read_lines(members / f"{name}.tok.bpe.32000.{lang}")
            assert read_lines(out / f"{split}.tok.{lang}") == read_lines(members / f"{name}.tok.{lang}")
            assert read_lines(out / f"{split}.raw.{lang}") == read_lines(members / f"{name}.{lang}")
            assert (out / "bin" / f"{split}.en-de.{lang}.bin").is_file()
    plain = shared_data("wmt14", "plain")
    assert read_lines(out / "test.raw.de") == read_lines(plain / "newstest2014.de")[:TEST_LINES]  # untokenised
    assert read_lines(out / "test.tok.en")[0] == "Gutach : Increased safety for pedestrians"
    assert (out / "code").read_bytes() == (members / "bpe.32000").read_bytes()
    # one dictionary for both languages, counted over train only (under the 32768 cap here)
    dictionary = (out / "bin" / "dict.en.txt").read_text(encoding="utf-8")
    assert dictionary == (out / "bin" / "dict.de.txt").read_text(encoding="utf-8")
    symbols = {line.split(" ")[0] for line in dictionary.splitlines()} - {f"madeupword{i:04d}" for i in range(8)}
    assert symbols == {
        word for lang in ("en", "de") for line in read_lines(out / f"train.{lang}") for word in line.split()
    }

    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()}
    rc, stdout, stderr = prepare_command(*args, "--workers", 1, cwd=tmp_path)
    assert rc == 0, stderr[-3000:]
    assert "up to date" in stderr and "fairseq-preprocess" not in stderr and "unpack" not in stderr
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_archive_without_the_published_md5_is_refused(google_archive, tmp_path, monkeypatch, capsys):
    """The archive is checked against torchtext's MD5 of Google's file unless --archive-md5
    names another (an archive made again with the script); either way a mismatch is one line."""
    folder, archive_md5, _ = google_archive
    archive = folder / wmt14_b2t.ARCHIVE
    rc, _, stderr = prepare_command("wmt14", "--as", "b2t", "--archive-dir", folder, "--out", "out", cwd=tmp_path)
    assert rc == 2
    assert error_line(stderr) == (
        f"error: {archive}: md5 {archive_md5} is not the expected {wmt14_b2t.PUBLISHED_MD5} (corrupt or another "
        "version); an archive you made yourself needs --archive-md5 ITS_MD5"
    )
    other = "0" * 32
    monkeypatch.setattr(sys, "argv", ["fairseq-ln-prepare"])
    with pytest.raises(SystemExit) as exit_:
        cli.prepare(["wmt14", "--as", "b2t", "--archive-dir", str(folder), "--archive-md5", other, "--out", "out"])
    assert exit_.value.code == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: {archive}: md5 {archive_md5} is not the expected {other} (corrupt or another version); "
        "check what --archive-md5 says"
    )
    assert list(tmp_path.iterdir()) == []


def _truncated(members, folder):
    data = (folder.parent / "full.tar.gz").read_bytes()
    (folder / wmt14_b2t.ARCHIVE).write_bytes(data[: len(data) // 2])
    return r"wmt16_en_de\.tar\.gz: corrupt or truncated archive"


def _not_a_tar(members, folder):
    (folder / wmt14_b2t.ARCHIVE).write_text("<html>Google Drive can't scan this file for viruses</html>\n")
    return r"wmt16_en_de\.tar\.gz: corrupt or truncated archive"


def _incomplete(members, folder):
    tar_members(members, folder / wmt14_b2t.ARCHIVE, drop=["newstest2014.tok.de"])
    return r"wmt16_en_de\.tar\.gz: missing newstest2014\.tok\.de$"


def _misaligned(members, folder):
    staging = folder.parent / "staging"
    staging.mkdir()
    for path in members.iterdir():
        write_lines(staging / path.name, read_lines(path)[:-1] if path.name == "newstest2015.de" else read_lines(path))
    tar_members(staging, folder / wmt14_b2t.ARCHIVE)
    return r"wmt16_en_de\.tar\.gz: newstest2015\.de has 199 lines but newstest2015\.tok\.bpe\.32000\.en has 200: not aligned$"


@pytest.mark.parametrize("damage", [_truncated, _not_a_tar, _incomplete, _misaligned])
def test_a_bad_archive_is_one_line_and_leaves_nothing(damage, google_archive, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["fairseq-ln-prepare"])
    source, _, members = google_archive
    (tmp_path / "full.tar.gz").write_bytes((source / wmt14_b2t.ARCHIVE).read_bytes())
    folder = tmp_path / "archive"
    folder.mkdir()
    expected = damage(members, folder)
    before = tree(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.prepare(
            ["wmt14", "--as", "b2t", "--archive-dir", str(folder), "--archive-md5", md5(folder / wmt14_b2t.ARCHIVE)]
            + ["--out", str(tmp_path / "data" / "out"), "--workers", "1"]
        )
    assert exit_.value.code == 2
    line = error_line(capsys.readouterr().err)
    assert re.search(expected, line), line
    assert tree(tmp_path) == before  # no data/, no out, out.work or out.lock


def test_without_the_archive_it_says_where_to_fetch_it(tmp_path, monkeypatch, capsys):
    """Google Drive's large-file page needs a browser: the error names the URL, where to put the
    file and --archive-dir, in one line."""
    monkeypatch.setattr(sys, "argv", ["fairseq-ln-prepare"])
    downloads = tmp_path / "downloads"
    for args, expected in (
        (
            ["--download-dir", str(downloads)],
            f"error: {wmt14_b2t.URL}: Google Drive serves wmt16_en_de.tar.gz only through a browser; "
            f"fetch it yourself to {downloads / wmt14_b2t.ARCHIVE} or pass --archive-dir DIR holding it",
        ),
        (
            ["--archive-dir", str(tmp_path)],
            f"error: {tmp_path / wmt14_b2t.ARCHIVE}: file not found (--archive-dir must hold Google's "
            f"wmt16_en_de.tar.gz, from {wmt14_b2t.URL})",
        ),
        (["--archive-dir", str(tmp_path / "none")], f"error: --archive-dir {tmp_path / 'none'}: no such folder"),
    ):
        with pytest.raises(SystemExit) as exit_:
            cli.prepare(["wmt14", "--as", "b2t", *args, "--out", str(tmp_path / "out")])
        assert exit_.value.code == 2
        assert error_line(capsys.readouterr().err) == expected
    assert list(tmp_path.iterdir()) == []


def test_defaults_and_what_b2t_refuses(monkeypatch, tmp_path, capsys):
    """Default output data/wmt16.en-de.b2t with the rest of newstest2010-2016 from the archive;
    the options of a preparation that segments its own text are refused, as is a test set the
    archive does not hold."""
    calls = []
    monkeypatch.setattr(wmt14_b2t, "prepare", lambda **kw: calls.append(kw) or {"sizes": {}})
    wmt14.main(["--as", "b2t"])
    (call,) = calls
    assert (call["out_dir"], call["extra_tests"], call["archive_md5"]) == (
        REPO / "data" / "wmt16.en-de.b2t",
        list(wmt14.EXTRA_TESTS),
        None,
    )
    assert call["download_dir"] == str(REPO / "data" / "downloads") and call["joined"] is True
    for args, expected in (
        (["--as", "b2t", "--merges", "500"], "error: --merges: not with --as b2t "),
        (["--as", "b2t", "--sentencepiece", "8000"], "error: --sentencepiece: not with --as b2t "),
        (["--as", "b2t", "--train", "t", "--valid", "v", "--test", "t"], "error: --train, --valid, --test: not with"),
        (["--as", "admin", "--archive-md5", "0" * 32], "error: --archive-md5: only with --as b2t "),
        (["--as", "b2t", "--archive-md5", "xyz"], "error: argument --archive-md5: invalid MD5 (32 hex digits) value"),
    ):
        with pytest.raises(SystemExit) as exit_:
            wmt14.main(args)
        assert exit_.value.code == 2
        assert error_line(capsys.readouterr().err).startswith(expected)
    monkeypatch.undo()
    with pytest.raises(DataError, match=r"^newstest2017: not in wmt16_en_de\.tar\.gz \(it holds newstest2009-2016\)$"):
        wmt14_b2t.prepare(tmp_path / "out", archive_dir=tmp_path, extra_tests=["newstest2017"])
    assert list(tmp_path.iterdir()) == []


def test_the_b2t_recipes_train_on_it():
    b2t = [name for name in list_recipes() if name.startswith(("wmt14/b2t/", "wmt14/b2t_released/"))]
    assert len(b2t) >= 11
    for name in b2t:
        assert REPO / load_recipe(name).data["data"] == REPO / "data" / "wmt16.en-de.b2t", name
    assert load_recipe("wmt14/residual").data["data"] == "data/wmt14.en-de"  # the others keep theirs


def test_nwords_caps_the_dictionary(tmp_path):
    """--nwordssrc/--nwordstgt N: N entries with the four special symbols (the most frequent types)."""
    words = [f"w{i}" for i in range(30)]
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            write_lines(tmp_path / f"{split}.{lang}", [" ".join(words[: i + 1]) for i in range(30)])
    fairseq_preprocess(*(tmp_path / s for s in ("train", "valid", "test", "bin")), "en", "de", True, 1, nwords=16)
    assert [line.split()[0] for line in read_lines(tmp_path / "bin" / "dict.en.txt")] == words[:12]


def test_archive_members_written_dot_slash_count_as_their_names(tmp_path):
    """``tar -czf A.tgz .`` stores ``./NAME``: such an archive is read the same."""
    (tmp_path / "a.txt").write_text("x\n")
    with tarfile.open(tmp_path / "a.tgz", "w:gz") as tar:
        tar.add(tmp_path / "a.txt", arcname="./a.txt")
    assert (extract(tmp_path / "a.tgz", tmp_path / "out", ["a.txt"]) / "a.txt").read_text() == "x\n"
    with pytest.raises(DataError, match=r"a\.tgz: missing b\.txt$"):
        extract(tmp_path / "a.tgz", tmp_path / "out2", ["a.txt", "b.txt"])


def test_evaluation_reads_it_unchanged(prepared, tmp_path):
    """fairseq-ln-evaluate scores a model trained on it as on the other WMT preparation: each
    test set's SacreBLEU against the archive's raw references, and their mean."""
    out = prepared[0] / "out"
    recipe_file = tmp_path / "tiny.yaml"
    recipe_file.write_text(
        TINY_RECIPE.format(arch="transformer_b2t")
        .replace("src, target_lang: tgt", "en, target_lang: de")
        .replace(
            "generate: {beam: 2, average_last: 2}",
            "generate: {beam: 2, lenpen: 0.6, test_sets_lenpen: 1.0, extra: [--max-len-b, '10'], "
            "test_sets: [newstest2013, newstest2014]}",
        )
        .replace("checkpoint: {no_save: true}", "checkpoint: {no_epoch_checkpoints: true}")
    )
    run_dir = tmp_path / "run"
    launch = Launch(
        load_recipe(recipe_file),
        str(out / "bin"),
        str(run_dir / "checkpoints"),
        cpu_workers=1,
        extra=["--max-update", "4"],
    )
    train(launch, run_dir)
    result = evaluate(run_dir, echo=lambda *_: None)
    assert list(result["test_sets"]) == ["newstest2013", "newstest2014"]
    expected = {
        name: round(sacrebleu_cli(out / f"{split}.raw.de", run_dir / f"{split}.hyp.detok.de"), 2)
        for name, split in (("newstest2013", "test4"), ("newstest2014", "test"))
    }
    assert {name: s["sacrebleu"]["score"] for name, s in result["test_sets"].items()} == expected
    assert result["bleu"]["sacrebleu_mean"]["sets"] == expected
    assert "compound_split" in result["bleu"]  # test.tok.de: the tokenised references
