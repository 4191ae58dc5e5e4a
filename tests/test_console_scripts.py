"""The console commands of pyproject.toml's ``[project.scripts]``, as installed: each one is on
the environment's PATH, does what its ``scripts/*.py`` twin does, and fails with one line."""

import importlib
import pkgutil
import subprocess
import tomllib

import pytest
from conftest import BIN, REPO, run_cli

import fairseq_layernorm_plugins.prepare as prepare_package
from fairseq_layernorm_plugins import cli

SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def run(command, *args):
    return subprocess.run([str(command), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_each_command_is_installed_and_names_a_cli_function():
    assert set(SCRIPTS) == {
        "fairseq-ln-prepare",
        "fairseq-ln-train",
        "fairseq-ln-evaluate",
        "fairseq-ln-table",
        "fairseq-ln-submit",
    }
    for command, target in SCRIPTS.items():
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function)), target
        assert (BIN / command).is_file(), f"{command} not installed in {BIN} (rerun scripts/setup_env.sh)"


def test_prepare_offers_every_corpus_module():
    """Each preparation module with a command line is a corpus of fairseq-ln-prepare (toy data is not)."""
    with_main = {
        name
        for _, name, _ in pkgutil.iter_modules(prepare_package.__path__)
        if hasattr(importlib.import_module(f"{prepare_package.__name__}.{name}"), "main")
    }
    assert set(cli.CORPORA) == with_main


def test_train_dry_run_prints_the_scripts_command(tmp_path):
    """fairseq-ln-train and scripts/train.py print the same fairseq-train command and exit 0."""
    args = ["iwslt14_mini/preln", "--dry-run", "--runs", tmp_path, "--", "--max-epoch", "5"]
    installed = run_cli("fairseq-ln-train", *args).splitlines()[-1]
    script = run_cli("python", REPO / "scripts" / "train.py", *args).splitlines()[-1]
    assert installed == script
    assert installed.startswith(str(BIN / "fairseq-train")) and "--arch transformer_preln_iwslt_de_en" in installed
    assert installed.endswith("--max-epoch 5") and str(tmp_path / "iwslt14_mini" / "preln") in installed


@pytest.mark.parametrize(
    "command, args, message",
    [
        ("fairseq-ln-prepare", ["europarl"], "error: name a corpus first (multi30k, "),
        ("fairseq-ln-train", ["no/such/recipe", "--dry-run"], "error: "),
        ("fairseq-ln-evaluate", ["{tmp}/missing-run"], "error: {tmp}/missing-run: "),
        (
            "fairseq-ln-table",
            ["{tmp}", "--table", "iwslt14", "--out", "{tmp}/t"],
            "error: no evaluated runs of iwslt14",
        ),
    ],
)
def test_bad_input_is_one_line_and_a_failure(tmp_path, command, args, message):
    proc = run(BIN / command, *(a.format(tmp=tmp_path) for a in args))
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message.format(tmp=tmp_path)), proc.stderr
    assert not (tmp_path / "t.md").exists()


def test_prepare_hands_the_rest_to_the_corpus(tmp_path):
    """fairseq-ln-prepare CORPUS ARGS is the corpus module's own command line (its --help, its options)."""
    proc = run(BIN / "fairseq-ln-prepare", "multi30k", "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: fairseq-ln-prepare multi30k")
    assert "--sentencepiece" in proc.stdout
    assert run(BIN / "fairseq-ln-prepare", "--help").returncode == 0
