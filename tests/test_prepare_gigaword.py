"""``fairseq-ln-prepare gigaword`` on an archive in the org_data release's format, built from
real headlines: newstest2014's English documents (first segment: the headline; second: the
article's first sentence), lower-cased, tokenised and with digits as ``#``, as the release
writes its text, rare words ``<unk>`` in train and dev and ``UNK`` in test."""

import collections
import hashlib
import json
import os
import re
import subprocess
import zipfile

import pytest
from conftest import BIN, SHARED_DATA
from rouge_score.rouge_scorer import RougeScorer
from sacremoses import MosesTokenizer

from fairseq_layernorm_plugins import cli

SGM = SHARED_DATA / "wmt14" / "test-full" / "newstest2014-deen-src.en.sgm"
SIZES = {"train": 124, "dev": 20, "test": 20}


def release_text(text, tokenizer=MosesTokenizer("en")):
    return re.sub(r"\d", "#", tokenizer.tokenize(text.lower(), escape=False, return_str=True))


def newstest_pairs():
    """[(first sentence, headline)] of newstest2014's English documents, in the release's text
    (written here again, not imported from prepare/gigaword_mini.py, which it checks)."""
    if not SGM.is_file():
        pytest.skip(f"{SGM}: not here (../shared/data)")
    docs = re.findall(r"<doc [^>]*>(.*?)</doc>", SGM.read_text(encoding="utf-8"), flags=re.S)
    pairs = []
    for doc in docs:
        segs = re.findall(r"<seg id=\"\d+\">(.*?)</seg>", doc)
        if len(segs) >= 2:
            pairs.append((release_text(segs[1]), release_text(segs[0])))
    return pairs


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """{split: [(sentence, headline)]} written as org_data/{train,dev,test}.{src,tgt}.txt in
    a zip archive; returns (archive, its sha256, the pairs as written)."""
    pairs = newstest_pairs()
    assert len(pairs) == sum(SIZES.values())
    splits, start = {}, 0
    for name, n in SIZES.items():
        splits[name], start = pairs[start : start + n], start + n
    counts = collections.Counter(w for pair in splits["train"] for side in pair for w in side.split())
    written = {}
    for name, rows in splits.items():
        unknown = "UNK" if name == "test" else "<unk>"
        written[name] = [
            tuple(" ".join(w if counts[w] > 1 else unknown for w in side.split()) for side in row) for row in rows
        ]
    root = tmp_path_factory.mktemp("gigaword")
    archive = root / "ggw_data.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name, rows in written.items():
            for side, index in (("src", 0), ("tgt", 1)):
                z.writestr(f"org_data/{name}.{side}.txt", "".join(row[index] + "\n" for row in rows))
    return archive, hashlib.sha256(archive.read_bytes()).hexdigest(), written


def prepare(*args):
    return subprocess.run(
        [str(BIN / "fairseq-ln-prepare"), "gigaword", *map(str, args)], capture_output=True, text=True
    )


def test_the_release_becomes_a_joined_bpe_data_bin_and_a_rerun_does_nothing(release, tmp_path):
    archive, sha256, written = release
    out = tmp_path / "gigaword"
    proc = prepare("--archive", archive, "--archive-sha256", sha256, "--merges", 300, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith(f"train on it: fairseq-ln-train RECIPE --data {out}")
    stamp = json.loads((out / "stamp.json").read_text())
    assert stamp["sizes"] == {"train": 124, "valid": 20, "test": 20} and stamp["merges"] == 300
    assert stamp["joined_dictionary"] is True and stamp["source"] == f"ggw_data.zip (sha256 {sha256})"
    # train and dev's <unk> are test's UNK; nothing else changed before BPE
    for split, name in (("valid", "dev"), ("test", "test")):
        for side, index in (("src", 0), ("tgt", 1)):
            expected = [row[index].replace("<unk>", "UNK") for row in written[name]]
            assert (out / f"{split}.tok.{side}").read_text().splitlines() == expected
    text = {p.name: p.read_text() for p in out.glob("*.src")} | {p.name: p.read_text() for p in out.glob("*.tgt")}
    assert not any("<unk>" in t for t in text.values())
    assert "UNK" in text["train.src"] and "UNK" in text["test.tgt"]
    # joint BPE: one code file of 300 merges, removing "@@ " gives the text back
    codes = (out / "code").read_text().splitlines()
    assert codes[0].startswith("#version") and len(codes) == 301
    for split, name in (("train", "train"), ("test", "test")):
        segmented = [(line + " ").replace("@@ ", "").strip() for line in text[f"{split}.tgt"].splitlines()]
        assert segmented == [row[1].replace("<unk>", "UNK") for row in written[name]]
    assert "@@" in text["train.src"]
    assert (out / "bin" / "dict.src.txt").read_text() == (out / "bin" / "dict.tgt.txt").read_text()
    assert (out / "bin" / "test.src-tgt.src.bin").is_file()

    rerun = prepare("--archive", archive, "--archive-sha256", sha256, "--merges", 300, "--out", out)
    assert rerun.returncode == 0 and "nothing to do" in rerun.stderr


def prepare_in_process(capsys, monkeypatch, *args):
    """The command's own entry point in this process (its errors exit before any
    subprocess): (exit code, stderr)."""
    monkeypatch.setattr("sys.argv", ["fairseq-ln-prepare"])
    with pytest.raises(SystemExit) as exit:
        cli.prepare(["gigaword", *map(str, args)])
    return subprocess.CompletedProcess(args, exit.value.code, "", capsys.readouterr().err)


def test_bad_archives_are_one_line_and_write_nothing(release, tmp_path, capsys, monkeypatch):
    archive, sha256, _ = release
    out = tmp_path / "gigaword"

    def prepare(*args):
        return prepare_in_process(capsys, monkeypatch, *args)

    wrong = prepare("--archive", archive, "--out", out)  # the published sha256: not this archive's
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1
    assert f"sha256 {sha256} is not the expected bc0c4a2e" in wrong.stderr and "--archive-sha256" in wrong.stderr
    missing = prepare("--download-dir", tmp_path / "empty", "--out", out)
    assert missing.returncode == 2 and "only through a browser" in missing.stderr
    assert str(tmp_path / "empty" / "ggw_data.zip") in missing.stderr
    partial = tmp_path / "partial.zip"
    with zipfile.ZipFile(partial, "w") as z:
        z.writestr("org_data/train.src.txt", "a\n")
    digest = hashlib.sha256(partial.read_bytes()).hexdigest()
    cut = prepare("--archive", partial, "--archive-sha256", digest, "--out", out)
    assert cut.returncode == 2 and "missing org_data/train.tgt.txt" in cut.stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["partial.zip"]


def test_headlines_end_to_end_prepare_train_evaluate_table(release, tmp_path):
    """The path a user takes, on the release's format built from real headlines:
    fairseq-ln-prepare gigaword, fairseq-ln-train gigaword/b2t (6L-6L narrowed to d 32 for a few
    updates), fairseq-ln-evaluate (fairseq-generate, then ROUGE), fairseq-ln-table. The scores are
    recomputed here from the hypotheses it wrote and the release's test headlines."""
    archive, sha256, written = release
    data, runs = tmp_path / "gigaword", tmp_path / "runs"
    assert prepare("--archive", archive, "--archive-sha256", sha256, "--merges", 300, "--out", data).returncode == 0
    narrow = ["--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64"]
    narrow += ["--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]
    train = subprocess.run(
        [BIN / "fairseq-ln-train", "gigaword/b2t", "--data", data, "--runs", runs, "--cpu-workers", "1"]
        + ["--", "--max-update", "60", "--update-freq", "1", "--warmup-updates", "10", *narrow],
        capture_output=True,
        text=True,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    run = runs / "gigaword" / "b2t" / "6L-6L.seed1"
    evaluated = subprocess.run([BIN / "fairseq-ln-evaluate", run], capture_output=True, text=True)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    result = json.loads((run / "results.json").read_text())
    assert "bleu" not in result and result["headline"] == "rouge" and result["sentences"] == SIZES["test"]

    hypotheses = (run / "test.hyp.tok.tgt").read_text().splitlines()
    logged = dict(
        line.split("\t")[0::2] for line in (run / "generate-test.log").read_text().splitlines() if line.startswith("H-")
    )
    assert hypotheses == [logged[f"H-{i}"] for i in range(len(logged))]  # in test-set order
    assert not any("@@" in h for h in hypotheses)  # BPE removed
    references = [row[1] for row in written["test"]]  # test's UNK kept as the release writes it
    assert (data / "test.tok.tgt").read_text().splitlines() == references and len(hypotheses) == len(references)
    scorer = RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    pairs = [scorer.score(r, h) for r, h in zip(references, hypotheses)]
    rouge = result["rouge"]["rouge"]
    for metric in ("rouge1", "rouge2", "rougeL"):
        assert rouge[metric] == round(100 * sum(p[metric].fmeasure for p in pairs) / len(pairs), 2)
    assert rouge["signature"].startswith("rouge-score ") and f"mean of {SIZES['test']} pairs" in rouge["signature"]
    perl = result["rouge"]["rouge_perl"]
    if "skipped" in perl and os.environ.get("CI") == "true":
        pytest.fail(f"ROUGE-1.5.5.pl not run in CI: {perl['skipped']}")
    if "skipped" not in perl:
        assert perl["signature"].startswith("ROUGE-1.5.5.pl")
        assert all(abs(perl[m] - rouge[m]) <= 1.0 for m in ("rouge1", "rouge2", "rougeL"))  # 20 pairs: see test_rouge
    assert f"F1 ROUGE-1 / ROUGE-2 / ROUGE-L (rouge-score, stemmed): {rouge['rouge1']:.2f} / " in evaluated.stdout

    out = tmp_path / "table"
    table = subprocess.run(
        [BIN / "fairseq-ln-table", runs, "--table", "gigaword", "--out", out], capture_output=True, text=True
    )
    assert table.returncode == 0, table.stderr[-3000:]
    line = next(row for row in (out.with_suffix(".md")).read_text().splitlines() if row.startswith("| b2t |"))
    expected = [
        f"{rouge[m]:.2f} (1) | {p:.2f} | {rouge[m] - p:+.2f}"
        for m, p in zip(("rouge1", "rouge2", "rougeL"), (38.43, 19.37, 35.72))
    ]
    assert line == "| b2t | " + " | ".join(expected) + " |"


def test_gigaword_mini_is_newstest2014s_documents_through_the_release_path(tmp_path):
    """fairseq-ln-prepare gigaword_mini: the 164 documents' (first sentence, headline) pairs in
    document order, 124 / 20 / 20, through the Gigaword pipeline; a rerun does nothing."""
    pairs = newstest_pairs()
    out = tmp_path / "mini"
    proc = subprocess.run(
        [str(BIN / "fairseq-ln-prepare"), "gigaword_mini", "--merges", "200", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    stamp = json.loads((out / "stamp.json").read_text())
    assert stamp["sizes"] == {"train": 124, "valid": 20, "test": 20} and "a stand-in" in stamp["source"]
    assert (out / "test.tok.tgt").read_text().splitlines() == [t for _, t in pairs[144:]]
    assert (out / "valid.tok.src").read_text().splitlines() == [s for s, _ in pairs[124:144]]
    train = [(line + " ").replace("@@ ", "").strip() for line in (out / "train.tgt").read_text().splitlines()]
    assert train == [t for _, t in pairs[:124]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mini"]  # no work folder or lock left
    rerun = subprocess.run(
        [str(BIN / "fairseq-ln-prepare"), "gigaword_mini", "--merges", "200", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert rerun.returncode == 0 and "nothing to do" in rerun.stderr
