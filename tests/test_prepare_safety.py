"""fairseq-ln-prepare as a user meets it: it never deletes or overwrites what it did not
write (an existing --out of other files is refused, for every corpus, also with --force),
it leaves nothing beside OUT but OUT (no OUT.lock, no empty OUT.work), bad input is one
line naming the file or argument with exit code 2, and it says where the data went and
the --data that fairseq-ln-train needs (the defaults land where the recipes read)."""

import json
import os
import random
import re
import subprocess
import sys
import time

import pytest
from conftest import BIN, PLUGIN_DIR, REPO, error_line

from fairseq_layernorm_plugins import cli
from fairseq_layernorm_plugins.prepare import (
    dataset,
    iwslt14,
    iwslt14_mini,
    multi30k,
    wikitext,
    wmt14,
    wmt14_b2t,
    wmt14_mini,
)
from fairseq_layernorm_plugins.prepare.iwslt14 import TEST_SETS
from fairseq_layernorm_plugins.recipes.config import load_recipe

DE = "der die das ein eine Hund Katze Haus Baum sieht läuft schnell groß klein rot und mit auf unter heute".split()
EN = "the the the a a dog cat house tree sees runs fast big small red and with on under today".split()


def _sentences(rng, n):
    pairs = []
    for _ in range(n):
        idx = [rng.randrange(len(DE)) for _ in range(rng.randint(3, 9))]
        pairs.append(
            (" ".join(DE[i] for i in idx).capitalize() + " .", " ".join(EN[i] for i in idx).capitalize() + " .")
        )
    return pairs


def tiny_iwslt14_raw(folder, train=60, segments=4):
    """An unpacked ``de-en.tgz`` in miniature: ``train.tags.de-en.{de,en}`` (talk headers
    and text lines) and the five dev/test xml files, a few ``<seg>`` each."""
    rng = random.Random(0)
    folder.mkdir(parents=True)
    pairs = _sentences(rng, train)
    header = ["<url>http://www.ted.com/talks/x.html</url>", "<keywords>talks</keywords>", "<talkid>1</talkid>"]
    for side, lang in enumerate(("de", "en")):
        lines = header + [f"<title>Titel {lang}</title>"] + [p[side] for p in pairs]
        (folder / f"train.tags.de-en.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for name in TEST_SETS:
        segs = _sentences(rng, segments)
        for side, lang in enumerate(("de", "en")):
            body = [f'<seg id="{i}"> {p[side]} </seg>' for i, p in enumerate(segs, start=1)]
            xml = [
                '<?xml version="1.0" encoding="UTF-8"?>',
                "<mteval>",
                '<doc docid="1">',
                *body,
                "</doc>",
                "</mteval>",
            ]
            (folder / f"{name}.de-en.{lang}.xml").write_text("\n".join(xml) + "\n", encoding="utf-8")
    return folder


def prepare_command(*args, cwd):
    """The installed ``fairseq-ln-prepare ARGS`` run in ``cwd``: (exit code, stdout, stderr)."""
    proc = subprocess.run(
        [str(BIN / "fairseq-ln-prepare"), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    return proc.returncode, proc.stdout, proc.stderr


def tree(folder):
    """{relative path: bytes} of every file under ``folder`` (and its empty folders)."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(folder.rglob("*"))
        if p.is_file() or not any(p.iterdir())
    }


def test_an_existing_folder_of_other_files_is_refused_and_left_as_it_was(tmp_path, monkeypatch, capsys):
    """`mkdir -p v/sub && echo x > v/notes.txt && fairseq-ln-prepare iwslt14 --raw-dir RAW --out v`
    once replaced v (notes.txt and sub/ gone, exit 0). Now it is refused (--force too: the
    test below); a folder prepare wrote itself is re-run over, also with --force, unless
    the user put a file of theirs into it; nothing but OUT is left beside OUT."""
    raw = tiny_iwslt14_raw(tmp_path / "raw")
    v = tmp_path / "v"
    (v / "sub").mkdir(parents=True)
    (v / "notes.txt").write_text("x\n")
    before = tree(tmp_path)
    rc, _, err = prepare_command("iwslt14", "--raw-dir", raw, "--out", "v", "--merges", 200, cwd=tmp_path)
    assert rc == 2, err[-3000:]
    assert error_line(err) == (
        f"error: {v}: exists and holds files this command did not write (notes.txt, sub/); "
        "choose another --out or empty it"
    )
    assert tree(tmp_path) == before  # nothing changed: no v.lock, no v.work, v as it was

    monkeypatch.setattr(sys, "argv", ["fairseq-ln-prepare"])
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    cli.prepare(["iwslt14", "--raw-dir", str(raw), "--out", "out", "--merges", "200", "--workers", "1"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "raw", "v"]  # no out.lock, no out.work
    # the last line: where the data is (absolute) and the --data fairseq-ln-train needs for it
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"{out}: train ") and last.endswith(f"; train on it: fairseq-ln-train RECIPE --data {out}")
    written = tree(out)
    for force in ([], ["--force"]):  # its own folder: up to date, or rewritten with --force
        cli.prepare(["iwslt14", "--raw-dir", str(raw), "--out", "out", "--merges", "200", "--workers", "1", *force])
        assert capsys.readouterr().out.strip().splitlines()[-1] == last
        assert tree(out).keys() == written.keys()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "raw", "v"]

    stamp = json.loads((out / "stamp.json").read_text())
    del stamp["files"]  # a folder written before stamps listed their files: known by its layout
    (out / "stamp.json").write_text(json.dumps(stamp))
    cli.prepare(["iwslt14", "--raw-dir", str(raw), "--out", "out", "--merges", "200"])
    assert capsys.readouterr().out.strip().splitlines()[-1] == last

    def late_file(*args):  # a file put into OUT while the new one is being built
        (out / "late.txt").write_text("mine\n")
        return preprocess(*args)

    preprocess = dataset.fairseq_preprocess
    monkeypatch.setattr(dataset, "fairseq_preprocess", late_file)
    with pytest.raises(SystemExit) as exit_:
        cli.prepare(["iwslt14", "--raw-dir", str(raw), "--out", "out", "--merges", "200", "--workers", "1", "--force"])
    assert exit_.value.code == 2
    assert "holds files this command did not write (late.txt)" in error_line(capsys.readouterr().err)
    assert tree(out).keys() == {*written, "late.txt"}  # not replaced
    # the finished steps stay for a rerun to resume (and nothing else: no out.lock, no temporary folders)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "out.work", "raw", "v"]
    assert sorted(p.name for p in (tmp_path / "out.work").iterdir()) == ["bpe200.de-en", "tokenize.de-en"]
    monkeypatch.setattr(dataset, "fairseq_preprocess", preprocess)
    (out / "late.txt").unlink()

    (out / "my_results.txt").write_text("BLEU 34.1\n")  # the user's file in prepare's folder
    with pytest.raises(SystemExit) as exit_:
        cli.prepare(["iwslt14", "--raw-dir", str(raw), "--out", "out", "--merges", "150", "--force"])
    assert exit_.value.code == 2
    assert "holds files this command did not write (my_results.txt)" in error_line(capsys.readouterr().err)
    assert (out / "my_results.txt").read_text() == "BLEU 34.1\n" and tree(out).keys() == {*written, "my_results.txt"}


# per corpus: arguments whose inputs would fail fast if the output folder were not checked first
CORPUS_ARGS = {
    "iwslt14": ["--raw-dir", "{tmp}/no-raw"],
    "iwslt14_mini": ["--iwslt-dir", "{tmp}/no-iwslt"],
    "wmt14": ["--train", "{tmp}/t", "--valid", "{tmp}/v", "--test", "{tmp}/t", "--extra-tests"],
    "wmt14_mini": ["--shared-data", "{tmp}/no-shared"],
    "multi30k": ["--raw-dir", "{tmp}/no-raw"],
    "wikitext2": ["--raw-dir", "{tmp}/no-raw"],
    "wikitext103": ["--raw-dir", "{tmp}/no-raw"],
    "gigaword": ["--raw-dir", "{tmp}/no-raw"],
    "gigaword_mini": ["--shared-data", "{tmp}/no-shared"],
    "librispeech": ["--source", "{tmp}/no-source"],
    "librispeech_espeak": ["--shared-data", "{tmp}/no-shared"],
}


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["", "force"])
@pytest.mark.parametrize("corpus", cli.CORPORA)
def test_every_corpus_refuses_a_folder_it_did_not_write(corpus, force, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["fairseq-ln-prepare"])
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine" / "sub").mkdir(parents=True)
    (tmp_path / "mine" / "notes.txt").write_text("x\n")
    before = tree(tmp_path)
    args = [a.format(tmp=tmp_path) for a in CORPUS_ARGS[corpus]]
    with pytest.raises(SystemExit) as exit_:
        cli.prepare([corpus, *args, "--out", "mine", *force])
    assert exit_.value.code == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: {tmp_path / 'mine'}: exists and holds files this command did not write (notes.txt, sub/); "
        "choose another --out or empty it"
    )
    assert tree(tmp_path) == before

    (tmp_path / "afile").write_text("not a folder\n")
    with pytest.raises(SystemExit) as exit_:
        cli.prepare([corpus, *args, "--out", "afile", *force])
    assert exit_.value.code == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: {tmp_path / 'afile'}: exists and is not a folder; choose another --out"
    )
    assert (tmp_path / "afile").read_text() == "not a folder\n"


def _no_raw_dir(raw):
    return ["--raw-dir", raw.parent / "nowhere"], rf"^error: --raw-dir {raw.parent / 'nowhere'}: no such folder$"


def _raw_file_missing(raw):
    (raw / "IWSLT14.TED.tst2012.de-en.en.xml").unlink()
    return ["--raw-dir", raw], rf"^error: {raw}: missing IWSLT14\.TED\.tst2012\.de-en\.en\.xml$"


def _bad_line(raw):
    path = raw / "train.tags.de-en.de"
    lines = path.read_bytes().split(b"\n")
    lines[6] = b"Stra\xdfe"  # Latin-1, not UTF-8
    path.write_bytes(b"\n".join(lines))
    return ["--raw-dir", raw], rf"^error: {path}:7: invalid UTF-8 "


def _misaligned(raw):
    with open(raw / "train.tags.de-en.en", "a", encoding="utf-8") as f:
        f.write("One more line .\n")
    return ["--raw-dir", raw], r"^error: .*train\.tags\.de-en\.de has \d+ text lines but .*\.en has \d+: not aligned$"


def _no_value(raw):
    return ["--raw-dir"], r"^error: argument --raw-dir: expected one argument"


def _not_a_number(raw):
    return ["--raw-dir", raw, "--merges", "many"], r"^error: argument --merges: invalid positive int value: 'many'"


def _not_a_count(raw):
    return ["--raw-dir", raw, "--train-pairs", "-1"], r"^error: argument --train-pairs: must be at least 1, not -1"


@pytest.mark.parametrize(
    "damage", [_no_raw_dir, _raw_file_missing, _bad_line, _misaligned, _no_value, _not_a_number, _not_a_count]
)
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(damage, tmp_path, monkeypatch, capsys):
    """No traceback, one line naming the file (and line) or the argument, exit code 2, and
    nothing half-written: no OUT, no OUT.work (not even an empty one), no OUT.lock."""
    monkeypatch.setattr(sys, "argv", ["fairseq-ln-prepare"])
    raw = tiny_iwslt14_raw(tmp_path / "raw")
    args, expected = damage(raw)
    before = tree(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.prepare(["iwslt14", *map(str, args), "--out", str(tmp_path / "data" / "out"), "--workers", "1"])
    assert exit_.value.code == 2
    line = error_line(capsys.readouterr().err)
    assert re.search(expected, line), line
    assert tree(tmp_path) == before  # not even data/


def test_bad_input_through_the_console_command(tmp_path):
    raw = tiny_iwslt14_raw(tmp_path / "raw")
    _, expected = _bad_line(raw)
    rc, _, err = prepare_command("iwslt14", "--raw-dir", raw, "--out", "out", "--workers", 1, cwd=tmp_path)
    assert rc == 2
    assert re.search(expected, error_line(err))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]


def test_an_unknown_corpus_is_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.prepare(["europarl"])
    assert exit_.value.code == 2
    assert error_line(capsys.readouterr().err).startswith("error: name a corpus first (multi30k, ")


def test_default_outputs_are_where_the_recipes_read_their_data(tmp_path, monkeypatch):
    """Run from any folder, fairseq-ln-prepare CORPUS writes the folder fairseq-ln-train RECIPE
    reads by default (the recipe's data, under the repository), not a data/ of the current folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["fairseq-ln-prepare"])
    outs = {}
    for module in (iwslt14, iwslt14_mini, multi30k, wikitext, wmt14, wmt14_b2t, wmt14_mini):
        monkeypatch.setattr(
            module, "prepare", lambda *a, _m=module, **kw: outs.setdefault(_m.__name__, []).append(kw) or {"sizes": {}}
        )
    for argv in (
        ["iwslt14"],
        ["iwslt14_mini"],
        ["multi30k"],
        ["wmt14"],
        ["wmt14", "--as", "admin"],
        ["wmt14", "--as", "b2t"],
        ["wmt14_mini"],
        ["wikitext2"],
        ["wikitext103"],
    ):
        cli.prepare(argv)
    got = [str(kw["out_dir"]) for name in sorted(outs) for kw in outs[name]]
    expected = {
        str(REPO / load_recipe(recipe).data["data"])
        for recipe in (
            "iwslt14/preln",
            "iwslt14_mini/preln",
            "multi30k/preln",
            "wmt14/residual",
            "wmt14/admin/admin",
            "wmt14/b2t/b2t",
            "wikitext103/preln",
            "wikitext2/preln",
        )
    }
    assert expected <= set(got), (expected, got)
    assert all(out.startswith(str(REPO / "data") + "/") for out in got), got


def test_the_lock_is_removed_yet_two_preparations_never_overlap(tmp_path):
    """OUT.lock is removed when a preparation ends (unlinked while still held). A process that
    was waiting on the removed file and one that arrives just after and creates a new file
    must still take turns: the waiter checks, once it holds the lock, that its file is still
    OUT.lock."""
    from fairseq_layernorm_plugins.prepare.steps import exclusive

    lock, log, go = tmp_path / "out.lock", tmp_path / "log", tmp_path / "go"
    script = (  # (the package itself, registering fairseq's models, is not needed: it takes seconds)
        "import logging, os, sys, time, types\n"
        "logging.basicConfig(level=logging.INFO)\n"
        f"sys.modules['fairseq_layernorm_plugins'] = types.ModuleType('fairseq_layernorm_plugins')\n"
        f"sys.modules['fairseq_layernorm_plugins'].__path__ = [{str(PLUGIN_DIR)!r}]\n"
        "from fairseq_layernorm_plugins.prepare.steps import exclusive\n"
        "lock, log, go = sys.argv[1:]\n"
        "print('ready', file=sys.stderr, flush=True)\n"
        "while go != '-' and not os.path.exists(go): time.sleep(0.01)\n"
        "with exclusive(lock):\n"
        "    open(log, 'a').write('in\\n'); time.sleep(1.5); open(log, 'a').write('out\\n')\n"
    )

    def start(name, wait_for, expected):
        err = tmp_path / f"{name}.err"
        child = subprocess.Popen([sys.executable, "-c", script, lock, log, wait_for], stderr=open(err, "w"))
        deadline = time.monotonic() + 120
        while expected not in err.read_text():  # (a file, not a pipe: a hang here fails, it does not block)
            assert child.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.05)
        return child

    with exclusive(lock):
        assert lock.is_file()
        waiter = start("waiter", "-", "waiting for it")  # waits on this lock file
        latecomer = start("latecomer", str(go), "ready")  # locks as soon as this one has let go
    go.touch()
    assert waiter.wait(timeout=120) == 0 and latecomer.wait(timeout=120) == 0
    assert log.read_text().split() == ["in", "out", "in", "out"]  # one after the other
    assert not lock.exists()
