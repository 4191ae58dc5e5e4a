"""Multi30k: the recipe on the real files, the download path against a local HTTP server
standing in for the official repository (checksums, cache, offline message), and the
README's main job end to end on a tiny budget without ../shared."""

import argparse
import contextlib
import csv
import functools
import gzip
import http.server
import json
import shutil
import sys
import threading

import pytest
from conftest import REPO, shared_data

from fairseq_layernorm_plugins.experiments.curves import read_log_curves, unigram_bits
from fairseq_layernorm_plugins.methods import PAPER_METHODS, method_names
from fairseq_layernorm_plugins.prepare import fetch, multi30k
from fairseq_layernorm_plugins.prepare.textio import DataError, read_lines
from fairseq_layernorm_plugins.recipes.config import load_recipe

sys.path.insert(0, str(REPO / "scripts"))
import main_job  # noqa: E402

SPLITS = [f"{prefix}.{lang}.gz" for prefix in ("train", "val", "test_2016_flickr") for lang in ("de", "en")]


@contextlib.contextmanager
def file_server(root):
    """An HTTP server on 127.0.0.1 serving ``root``; yields (URL template, list of requested paths)."""
    requests = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            requests.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{{name}}", requests
    finally:
        server.shutdown()
        server.server_close()


def closed_port_url():
    """A URL template on a loopback port that nothing listens on (connection refused)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/{{name}}"


@pytest.fixture
def mirror(tmp_path):
    """A folder with the real raw files, as the official repository serves them."""
    root = tmp_path / "mirror"
    root.mkdir()
    for name in SPLITS:
        shutil.copy(shared_data("multi30k", "task1_raw", name), root / name)
    return root


def test_recipe_on_the_real_files(tmp_path):
    raw = shared_data("multi30k", "task1_raw")
    out = tmp_path / "multi30k"
    stamp = multi30k.prepare(out, raw_dir=raw)
    sizes = stamp["sizes"]
    assert sizes["valid"] == 1014 and sizes["test"] == 1000
    assert 0.9 * 29000 <= sizes["train"] <= 29000  # clean-corpus (1..250 pieces, ratio 1.5) drops a few pairs
    with gzip.open(raw / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        assert read_lines(out / "test.raw.en") == f.read().splitlines()  # SacreBLEU's references: the raw file itself
    assert (out / "bin" / "dict.de.txt").read_text() == (out / "bin" / "dict.en.txt").read_text()  # joined dictionary

    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
    assert 7900 <= sp.get_piece_size() <= 8000
    pieces, refs = read_lines(out / "test.en"), read_lines(out / "test.raw.en")
    same = sum(sp.decode(p.split()) == r for p, r in zip(pieces, refs))
    assert same >= 0.99 * len(refs)  # what fairseq-generate --remove-bpe sentencepiece gives back is the text


def test_download_verifies_caches_and_rejects_a_wrong_file(tmp_path, mirror):
    cache = tmp_path / "downloads"
    with file_server(mirror) as (url, requests):
        files = multi30k.raw_files(SPLITS, download_dir=cache, url=url, wait=0)
        assert sorted(requests) == sorted(f"/{name}" for name in SPLITS)
        for name, path in files.items():
            assert path == cache / "multi30k" / name
            assert path.read_bytes() == (mirror / name).read_bytes()
        requests.clear()
        assert multi30k.raw_files(SPLITS, download_dir=cache, url=url, wait=0) == files
        assert requests == []  # served from the cache

        (mirror / "val.en.gz").write_bytes(gzip.compress(b"another version\n"))
        with pytest.raises(
            DataError, match=r"val\.en\.gz: download failed after 3 attempts \(.*: sha256 \w+ is not the expected"
        ):
            multi30k.raw_files(["val.en.gz"], download_dir=tmp_path / "other", url=url, wait=0)
    assert not list((tmp_path / "other" / "multi30k").iterdir())  # nothing half-written or wrong is kept


def test_raw_dir_must_hold_the_official_files(tmp_path):
    (tmp_path / "train.de.gz").write_bytes(gzip.compress(b"ein Hund\n"))
    with pytest.raises(DataError, match=r"train\.de\.gz: sha256 \w+ is not the expected"):
        multi30k.raw_files(["train.de.gz"], raw_dir=tmp_path)
    with pytest.raises(
        DataError, match=r"train\.en\.gz: file not found \(--raw-dir must hold train\.en\.gz, train\.de\.gz\)"
    ):
        multi30k.raw_files(["train.en.gz", "train.de.gz"], raw_dir=tmp_path)


def test_corrupt_gzip_is_a_one_line_error(tmp_path):
    bad = tmp_path / "train.de.gz"
    bad.write_bytes(gzip.compress(b"ein Hund\n" * 100)[:-20])
    with pytest.raises(DataError, match=r"train\.de\.gz: corrupt or truncated gzip file"):
        multi30k.gunzip({"train.de.gz": bad}, {}, tmp_path)


def test_main_job_offline_ends_with_one_line_naming_the_url(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(multi30k, "SHARED_RAW", tmp_path / "no-shared")  # a user's machine: no ../shared/data
    monkeypatch.setattr(fetch.time, "sleep", lambda seconds: None)
    url = closed_port_url()
    with pytest.raises(SystemExit) as exit_:
        main_job.main(
            [
                "--url",
                url,
                "--download-dir",
                str(tmp_path / "downloads"),
                "--data",
                str(tmp_path / "data"),
                "--runs",
                str(tmp_path / "runs"),
            ]
        )
    message = str(exit_.value.code)
    assert "\n" not in message
    assert message.startswith(f"error: {url.format(name='train.de.gz')}: download failed after 3 attempts")
    assert (
        f"fetch it yourself to {tmp_path / 'downloads' / 'multi30k' / 'train.de.gz'} or pass --raw-dir DIR" in message
    )
    assert not (tmp_path / "data").exists() and not (tmp_path / "runs").exists()


@pytest.mark.slow(1.5)
def test_main_job_end_to_end_through_the_download_path(tmp_path, monkeypatch, mirror):
    monkeypatch.setattr(multi30k, "SHARED_RAW", tmp_path / "no-shared")
    runs = tmp_path / "runs"
    with file_server(mirror) as (url, requests):
        main_job.main(
            [
                "--url",
                url,
                "--download-dir",
                str(tmp_path / "downloads"),
                "--data",
                str(tmp_path / "data"),
                "--runs",
                str(runs),
                "--methods",
                "postln,preln",
                "--jobs",
                "2",
                "--minutes",
                "0",
                "--max-update",
                "4",
                "--test-lines",
                "20",
                "--depth-updates",
                "3",
            ]
        )
    assert sorted(requests) == sorted(f"/{name}" for name in SPLITS)
    with open(runs / "report.csv") as f:
        rows = {row["method"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"postln", "preln"}
    assert rows["postln"]["bleu_diff"] == "+0.00" and rows["postln"]["updates"] == "4"
    assert rows["preln"]["updates"] == "4" and rows["preln"]["updates_diff"] == "+0"
    assert float(rows["preln"]["bleu_diff"]) == pytest.approx(
        float(rows["preln"]["bleu"]) - float(rows["postln"]["bleu"]), abs=0.011
    )
    assert "case:mixed" in rows["preln"]["signature"]  # cased SacreBLEU
    markdown = (runs / "report.md").read_text()
    assert "SacreBLEU, detokenised on 20 test sentences" in markdown and "| preln |" in markdown
    assert (runs / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(read_lines(runs / "multi30k" / "preln" / "2L-2L.seed1" / "test.hyp.detok.en")) == 20
    # the depth column: each method at 18L-18L, judged by its own log against the unigram entropy
    with open(runs / "report-depth.csv") as f:
        deep = {row["method"]: row for row in csv.DictReader(f)}
    assert set(deep) == {"postln", "preln"}
    unigram = unigram_bits(tmp_path / "data")
    for method, row in deep.items():
        run = runs / "multi30k" / method / "18L-18L.seed1"
        launched = json.loads((run / "run.json").read_text())["command"]
        assert "--encoder-layers 18" in launched and "--decoder-layers 18" in launched
        valid = read_log_curves(run / "train.log")["valid"]
        assert row["updates"] == "3" and valid[-1]["update"] == 3
        assert row["valid_nll"] == f"{valid[-1]['nll_loss']:.2f}"
        assert row["status"] == ("trained" if valid[-1]["nll_loss"] < unigram else "stalled")
    assert "### 18L-18L, d=64: 3 updates of 1024 tokens" in markdown and f"({unigram:.2f} bits per token)" in markdown


@pytest.mark.parametrize("method", ["postln", "preln", "admin", "tfixup", "b2t", "deepnet"])
def test_depth_column_keeps_each_recipe_under_one_schedule(method):
    """The depth column changes a recipe's depth, width, budget and schedule, nothing else: each
    method keeps its optimizer (Admin's RAdam), initialisation and dropout."""
    args = argparse.Namespace(corpus="multi30k", depth="18L-18L", depth_updates=200)
    deep = main_job.deep_recipe(method, args).fairseq
    own = load_recipe(f"multi30k/{method}").fairseq
    assert deep["optimizer"] == own["optimizer"]
    assert deep["lr_scheduler"] == {"_name": "inverse_sqrt", "warmup_updates": 100, "warmup_init_lr": 1e-7}
    assert (deep["optimization"]["lr"], deep["optimization"]["max_update"]) == ([1e-3], 200)
    assert deep["dataset"]["max_tokens"] == 1024
    sizes = {"encoder_layers": 18, "decoder_layers": 18, "encoder_embed_dim": 64, "decoder_embed_dim": 64}
    sizes |= {"encoder_ffn_embed_dim": 256, "decoder_ffn_embed_dim": 256}
    assert {key: deep["model"][key] for key in sizes} == sizes
    assert {k: v for k, v in deep["model"].items() if k not in sizes} == {
        k: v for k, v in own["model"].items() if k not in sizes and not k.endswith("_layers")
    }


def test_main_job_trains_the_papers_six_unless_told_all():
    every = method_names("multi30k")
    assert main_job.chosen_methods(None, "multi30k") == list(PAPER_METHODS)
    assert main_job.chosen_methods("all", "multi30k") == every and set(PAPER_METHODS) < set(every)
    assert main_job.chosen_methods("dyt,postln", "multi30k") == ["dyt", "postln"]
    with pytest.raises(ValueError, match=r"unknown method\(s\) \['nope'\]; choose from postln, preln"):
        main_job.chosen_methods("postln,nope", "multi30k")
