"""Bad input to the console commands, as a user types it: one line naming the file (and line)
or the argument, exit status 2, and nothing written (no run folder, sbatch script or
submitit folder), instead of a traceback, a half-written run or a silently wrong one.

Each command fails at least once as a fresh process (``fails(..., fresh_process=True)``: the
installed script, nothing on stderr but the one line); the other cases run the same entry
point in this process (``helpers.cli_in_process``: its exit status, and everything written to
file descriptors 1 and 2, log records included), which saves a fresh interpreter importing
torch and fairseq per case."""

import json
import os
import subprocess

import pytest
from conftest import BIN
from helpers.cli_in_process import run_console_script

RECIPE = """
tokens_per_update: 1000
depths: {2L-2L: {}}
fairseq:
  task: {_name: translation, source_lang: src, target_lang: tgt}
  model: {_name: transformer_preln, encoder_embed_dim: 32, decoder_embed_dim: 32, encoder_ffn_embed_dim: 64,
          decoder_ffn_embed_dim: 64, encoder_attention_heads: 2, decoder_attention_heads: 2}
  criterion: {_name: cross_entropy}
  optimizer: {_name: adam}
  lr_scheduler: {_name: fixed}
  optimization: {lr: [0.005], max_update: 2}
  dataset: {max_tokens: 1000, disable_validation: true}
  common: {log_format: simple, seed: 1}
"""


def fails(command, *args, fresh_process=False):
    """Run a console command on a machine without a GPU (a fresh process, or its entry point in
    this one); assert it failed with exit status 2 and one line on stderr (an ``error: `` line);
    return that line."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    if fresh_process:
        proc = subprocess.run(
            [str(BIN / command), *map(str, args)], capture_output=True, text=True, env=env, timeout=300
        )
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    else:
        code, out, err = run_console_script(command, *args, env=env)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (
        f"exit {code}\n{out[-2000:]}\n{err[-3000:]}"
    )
    return lines[0]


@pytest.fixture
def recipe(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(RECIPE)
    return path


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "local"])
def test_submit_with_a_recipe_typo(tmp_path, dry_run):
    line = fails(
        "fairseq-ln-submit",
        "iwslt14/admn",
        "--runs",
        tmp_path / "runs",
        *(["--dry-run"] if dry_run else ["--cluster", "local"]),
        fresh_process=dry_run,
    )
    assert "configs/iwslt14/admn.yaml: recipe not found" in line and "iwslt14/admin" in line  # the nearest name
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "local"])
def test_submit_with_a_bad_depth_writes_no_script_and_submits_nothing(tmp_path, dry_run):
    """The grid's first run is fine, its second names a depth the recipe lacks: nothing is
    written (no first sbatch script, no submitit folder) and nothing is submitted."""
    extra = ["--dry-run"] if dry_run else ["--cluster", "local", "--cpu-workers", "1"]
    line = fails(
        "fairseq-ln-submit", "iwslt14/admin", "--depths", "6L-6L", "7L-7L", "--runs", tmp_path / "runs", *extra
    )
    assert "configs/iwslt14/admin.yaml: no depth 7L-7L (has 6L-6L)" in line
    assert not (tmp_path / "runs").exists()


def test_train_checks_data_before_writing_anything(recipe, tmp_path):
    line = fails("fairseq-ln-train", recipe, "--data", tmp_path / "nowhere", "--runs", tmp_path / "runs")
    assert line == f"error: --data {tmp_path / 'nowhere'}: no such data directory"
    (tmp_path / "notbin").mkdir()
    line = fails("fairseq-ln-train", recipe, "--data", tmp_path / "notbin", "--runs", tmp_path / "runs")
    assert line == f"error: --data {tmp_path / 'notbin'}: not a fairseq data-bin (no dict.src.txt, dict.tgt.txt)"
    line = fails("fairseq-ln-train", recipe, "--runs", tmp_path / "runs")  # no data named at all
    assert line == f"error: {recipe}: the recipe names no data: give --data"
    recipe.write_text(RECIPE + "data: nowhere/prepared\n")  # the recipe's own data, not prepared here
    line = fails("fairseq-ln-train", recipe, "--runs", tmp_path / "runs")
    assert "nowhere/prepared: no such data directory (the recipe's data" in line
    assert not (tmp_path / "runs").exists()


def test_train_asked_for_gpus_on_a_machine_without_one(recipe, tiny_data_bin, tmp_path):
    """Hiding CUDA takes a fresh process (torch reads CUDA_VISIBLE_DEVICES once)."""
    line = fails(
        "fairseq-ln-train",
        recipe,
        "--gpus",
        2,
        "--data",
        tiny_data_bin,
        "--runs",
        tmp_path / "runs",
        fresh_process=True,
    )
    assert line.startswith("error: --gpus 2: torch sees 0 GPU(s) here")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "bad, key, message",
    [
        ("  optimizer: {_name: adam}", "  optimizer: 5", "'fairseq.optimizer' must be a mapping of its options"),
        ("  model: {_name", "  modle: {_name", "'fairseq.modle' is not a fairseq config group (did you mean 'model'?)"),
        (
            "fairseq:",
            "modle: {dropout: 0.1}\nfairseq:",
            "unknown recipe key 'modle' (did you mean 'model' under 'fairseq:'?)",
        ),
        ("  optimizer: {_name: adam}", "  optimizer: {_name: 5}", "'fairseq.optimizer._name' must be a name, not 5"),
    ],
    ids=["group-not-a-mapping", "misspelled-group", "misspelled-top-level", "name-not-a-name"],
)
def test_bad_recipe_is_one_line_naming_the_file_and_line(recipe, tmp_path, bad, key, message):
    text = RECIPE.replace(bad, key, 1)
    recipe.write_text(text)
    line_number = next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(key.splitlines()[0]))
    line = fails("fairseq-ln-train", recipe, "--dry-run", "--runs", tmp_path / "runs")
    assert line.startswith(f"error: {recipe}:{line_number}: {message}")
    assert not (tmp_path / "runs").exists()


def test_bad_recipe_in_a_base_names_the_base(recipe, tmp_path):
    recipe.write_text(RECIPE.replace("  optimizer: {_name: adam}", "  optimizer: 5"))
    child = tmp_path / "child.yaml"
    child.write_text("base: tiny.yaml\ntokens_per_update: 2000\n")
    line = fails("fairseq-ln-train", child, "--dry-run", "--runs", tmp_path / "runs")
    number = recipe.read_text().splitlines().index("  optimizer: 5") + 1
    assert line.startswith(f"error: {recipe}:{number}: 'fairseq.optimizer' must be a mapping")


@pytest.mark.parametrize("option", ["--dry-run", "--gpus=2", "--seed"])
def test_own_options_after_the_pass_through_are_refused(recipe, tiny_data_bin, tmp_path, option):
    """``--`` passes the rest to fairseq-train: ``--dry-run`` there started a real run."""
    args = ["--data", tiny_data_bin, "--runs", tmp_path / "runs", "--", "--max-epoch", "1", option]
    line = fails("fairseq-ln-train", recipe, *args, *(["3"] if option == "--seed" else []))
    assert line == (
        f"error: {option.split('=')[0]} comes after '--', which passes it to fairseq-train: "
        "put this command's options before '--'"
    )
    assert not (tmp_path / "runs").exists()


@pytest.fixture
def evaluated_runs(tmp_path):
    """A folder with one evaluated run of iwslt14/preln (its run.json and results.json)."""
    run = tmp_path / "runs" / "iwslt14" / "preln" / "6L-6L.seed1"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"recipe": "iwslt14/preln", "depth": "6L-6L"}))
    result = {"recipe": "iwslt14/preln", "depth": "6L-6L", "headline": "tokenized", "run_dir": str(run)}
    result["bleu"] = {"tokenized": {"score": 30.0, "label": "tokenized BLEU"}}
    (run / "results.json").write_text(json.dumps(result))
    return tmp_path / "runs"


def test_table_names_a_mistyped_table(evaluated_runs, tmp_path):
    line = fails("fairseq-ln-table", evaluated_runs, "--table", "iwslt41", "--out", tmp_path / "t", fresh_process=True)
    assert line.startswith("error: --table iwslt41: no such table") and "(they have: iwslt14)" in line
    line = fails("fairseq-ln-table", evaluated_runs, "--table", "wmt14/admin", "--out", tmp_path / "t")
    assert line == f"error: no evaluated runs of wmt14/admin under {evaluated_runs} (evaluated there: iwslt14)"
    assert not list(tmp_path.glob("t.*"))


def test_table_names_a_missing_path(evaluated_runs, tmp_path):
    line = fails("fairseq-ln-table", evaluated_runs, tmp_path / "runz", "--table", "iwslt14", "--out", tmp_path / "t")
    assert line == f"error: {tmp_path / 'runz'}: no such run directory or folder of runs"
    assert not list(tmp_path.glob("t.*"))


def test_the_recipe_groups_are_fairseqs():
    """A recipe's ``fairseq:`` groups checked against fairseq's own config (a new fairseq group
    would be refused until added)."""
    import dataclasses

    from fairseq.dataclass.configs import FairseqConfig

    from fairseq_layernorm_plugins.recipes.config import FAIRSEQ_GROUPS

    assert FAIRSEQ_GROUPS == {f.name for f in dataclasses.fields(FairseqConfig)} - {"_name"}
