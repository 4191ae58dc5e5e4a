"""Training through the launcher and evaluation: checkpoint averaging, SacreBLEU equal to
the sacrebleu CLI, a copied run scored on its own checkpoints, fairseq-hydra-train (2-process
CPU data parallel: test_cpu_workers.py)."""

import json
import logging
import os
import shutil
import subprocess

import pytest
import torch
from conftest import BIN, shared_data

from fairseq_layernorm_plugins.prepare.iwslt14_mini import prepare as prepare_iwslt14_mini
from fairseq_layernorm_plugins.prepare.textio import read_lines, write_lines
from fairseq_layernorm_plugins.recipes.config import load_recipe
from fairseq_layernorm_plugins.runs.evaluate import (
    average_checkpoints,
    compound_split,
    evaluate,
    last_checkpoints,
    score,
)
from fairseq_layernorm_plugins.runs.launch import Launch, run_save_dir, train

TINY_RECIPE = """
tokens_per_update: 1000
generate: {{beam: 2, average_last: 2}}
fairseq:
  task: {{_name: translation, source_lang: src, target_lang: tgt}}
  model: {{_name: {arch}, encoder_layers: 2, decoder_layers: 2, encoder_embed_dim: 32, decoder_embed_dim: 32,
          encoder_ffn_embed_dim: 64, decoder_ffn_embed_dim: 64, encoder_attention_heads: 2, decoder_attention_heads: 2}}
  criterion: {{_name: cross_entropy}}
  optimizer: {{_name: adam}}
  lr_scheduler: {{_name: fixed}}
  optimization: {{lr: [0.003], max_update: 8}}
  dataset: {{max_tokens: 1000, disable_validation: true}}
  checkpoint: {{no_save: true}}
  common: {{log_format: simple, log_interval: 2, seed: 1}}
"""


def tiny_recipe(tmp_path, arch="transformer_preln"):
    path = tmp_path / f"tiny_{arch}.yaml"
    path.write_text(TINY_RECIPE.format(arch=arch))
    return load_recipe(path)


def test_average_of_two_checkpoints_is_the_elementwise_mean(tmp_path):
    torch.manual_seed(0)
    states = [{"w": torch.randn(5, 3), "h": torch.randn(4).half(), "steps": torch.tensor([7 + i])} for i in range(2)]
    for i, state in enumerate(states):
        torch.save({"model": state, "cfg": {"i": i}, "extra_state": {"epoch": i}}, tmp_path / f"c{i}.pt")
    out = torch.load(
        average_checkpoints([tmp_path / "c0.pt", tmp_path / "c1.pt"], tmp_path / "avg.pt"), weights_only=False
    )
    for key in ("w", "h"):
        expected = ((states[0][key].double() + states[1][key].double()) / 2).to(states[0][key].dtype)
        torch.testing.assert_close(out["model"][key], expected, rtol=0, atol=0)
        assert out["model"][key].dtype == states[0][key].dtype
    assert out["model"]["steps"].item() == 7 and out["cfg"] == {"i": 0}
    torch.save({"model": {"other": torch.zeros(1)}}, tmp_path / "c2.pt")
    with pytest.raises(ValueError, match=r"c2\.pt: parameters differ"):
        average_checkpoints([tmp_path / "c0.pt", tmp_path / "c2.pt"], tmp_path / "bad.pt")
    assert not (tmp_path / "bad.pt").exists()


def test_last_checkpoints_by_epoch_or_update(tmp_path):
    for name in (
        ["checkpoint_last.pt", "checkpoint_best.pt"]
        + [f"checkpoint{e}.pt" for e in range(1, 13)]
        + [f"checkpoint_{e}_{u}.pt" for e, u in ((1, 500), (2, 1000), (2, 1500))]
    ):
        (tmp_path / name).touch()
    assert [p.name for p in last_checkpoints(tmp_path, 10)] == [f"checkpoint{e}.pt" for e in range(12, 2, -1)]
    assert [p.name for p in last_checkpoints(tmp_path, 2, "update")] == ["checkpoint_2_1500.pt", "checkpoint_2_1000.pt"]
    assert [p.name for p in last_checkpoints(tmp_path / "nothing", 3)] == ["checkpoint_last.pt"]


def test_compound_split_is_fairseqs_rewrite():
    assert compound_split("ein well-known Satz") == "ein well ##AT##-##AT## known Satz"
    assert compound_split("a @-@ b") == "a @ ##AT##-##AT## @ b"
    assert compound_split("- x -") == "- x -"


def sacrebleu_cli(ref, hyp, *options):
    out = subprocess.run(
        [str(BIN / "sacrebleu"), str(ref), "-i", str(hyp), "-m", "bleu", "-b", "-w", "2", *options],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(out.strip())


@pytest.mark.parametrize("lowercase", [False, True])
def test_sacrebleu_scores_equal_the_cli(tmp_path, lowercase):
    refs = read_lines(shared_data("wmt14", "plain", "newstest2014.de"))[:400]
    hyps = [" ".join(w for i, w in enumerate(line.split()) if i % 4 != 1) for line in refs]  # a degraded system
    hyps = [h.upper() if i % 5 == 0 else h for i, h in enumerate(hyps)]
    write_lines(tmp_path / "ref.de", refs)
    write_lines(tmp_path / "hyp.de", hyps)
    scores = score(hyps, hyps, refs, refs, lowercase=lowercase)
    assert scores["sacrebleu"]["score"] == round(
        sacrebleu_cli(tmp_path / "ref.de", tmp_path / "hyp.de", *(["-lc"] if lowercase else [])), 2
    )
    assert scores["tokenized"]["score"] == round(
        sacrebleu_cli(tmp_path / "ref.de", tmp_path / "hyp.de", "--tokenize", "none"), 2
    )
    assert scores["sacrebleu"]["signature"].startswith("nrefs:1|case:" + ("lc" if lowercase else "mixed"))
    assert 10 < scores["sacrebleu"]["score"] < 90


def test_tokenized_scores_do_not_warn_about_tokenized_text(caplog):
    refs_tok = [f"ein hund läuft über {i} wiesen ." for i in range(150)]  # 150 lines ending in a tokenised period
    hyps_tok = [r.replace("läuft", "rennt") for r in refs_tok]
    with caplog.at_level(logging.WARNING, logger="sacrebleu"):
        scores = score(hyps_tok, [h[:-2] + "." for h in hyps_tok], refs_tok, [r[:-2] + "." for r in refs_tok])
    assert [r.getMessage() for r in caplog.records if r.name == "sacrebleu"] == []
    assert 0 < scores["tokenized"]["score"] < 100 and scores["compound_split"]["score"] == scores["tokenized"]["score"]


@pytest.mark.slow(1.5)
def test_train_then_evaluate_on_iwslt14_mini(tmp_path, capsys):
    """The main path: recipe -> launcher -> 2 update checkpoints -> averaged -> generate ->
    results.json whose SacreBLEU equals the CLI's on the files it wrote."""
    data = tmp_path / "mini"
    prepare_iwslt14_mini(shared_data("iwslt14"), data, test_lines=20)
    recipe = load_recipe("iwslt14_mini/postln").with_depth()
    run_dir = tmp_path / "run"
    launch = Launch(
        recipe,
        str(data / "bin"),
        str(run_dir / "checkpoints"),
        cpu_workers=1,
        extra=[
            "--max-update",
            "4",
            "--save-interval-updates",
            "2",
            "--keep-interval-updates",
            "2",
            "--disable-validation",
        ],
    )
    train(launch, run_dir)
    result = evaluate(run_dir, average_last=2, kind="update")
    printed = capsys.readouterr().out
    assert "averaged 2 checkpoints: checkpoint_1_4.pt, checkpoint_1_2.pt" in printed
    assert "nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:" in printed  # the signature is printed
    saved = json.loads((run_dir / "results.json").read_text())
    assert saved == result and result["sentences"] == 20 and result["headline"] == "tokenized"
    assert set(result["bleu"]) == {"sacrebleu", "tokenized", "compound_split"}
    cli = sacrebleu_cli(data / "test.raw.en", run_dir / "test.hyp.detok.en", "-lc")
    assert result["bleu"]["sacrebleu"]["score"] == round(cli, 2)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["recipe"] == "iwslt14_mini/postln" and "--max-update 4" in run["command"]


def test_recipe_runs_under_fairseq_hydra_train(tiny_data_bin, tmp_path):
    """The same recipe as a fairseq-hydra-train config; Admin's options survive hydra
    (it profiles), as they do on the command line."""
    recipe = tiny_recipe(tmp_path, "transformer_admin")
    recipe.data["fairseq"]["checkpoint"] = {}
    launch = Launch(recipe, str(tiny_data_bin), str(tmp_path / "ckpt"), cpu_workers=1)
    config = launch.write_hydra_config(tmp_path / "hydra" / "admin.yaml")
    proc = subprocess.run(
        [
            str(BIN / "fairseq-hydra-train"),
            "--config-dir",
            str(config.parent),
            "--config-name",
            "admin",
            f"hydra.run.dir={tmp_path / 'outputs'}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert "Admin: profiled 1 batch(es)" in log
    assert "Stopping training due to num_updates: 8 >= max_update: 8" in log
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").is_file()


def test_a_language_models_results_go_beside_it_only(tmp_path):
    """``out_dir`` keeps a second translation protocol's files apart; a language model's
    perplexity is written beside its run, so asking for another folder is refused."""
    from fairseq_layernorm_plugins.runs.evaluate import evaluate

    (tmp_path / "run.json").write_text(json.dumps({"task": "language_modeling"}))
    with pytest.raises(ValueError, match="written beside it"):
        evaluate(tmp_path, out_dir=tmp_path / "average5")
    assert not (tmp_path / "average5").exists()


def test_a_copied_run_is_evaluated_on_its_own_checkpoints(tiny_data_bin, tmp_path):
    """fairseq-ln-evaluate RUN scores RUN's checkpoints: a run trained by fairseq-ln-train, copied
    elsewhere and the original moved away, is evaluated (results and the checkpoints it names
    in the copy), not scored on (or failing for) the checkpoint its run.json was written beside."""
    data = tmp_path / "data"
    shutil.copytree(tiny_data_bin, data / "bin")
    for kind in ("tok", "raw"):
        shutil.copy(tiny_data_bin.parent / "test.tgt", data / f"test.{kind}.tgt")
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(
        TINY_RECIPE.format(arch="transformer_preln").replace("no_save: true", "no_epoch_checkpoints: true")
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def command(*args):
        proc = subprocess.run(list(map(str, args)), capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]

    command(
        BIN / "fairseq-ln-train",
        recipe,
        "--cpu-workers",
        1,
        "--data",
        data,
        "--runs",
        tmp_path / "runs",
        "--",
        "--max-update",
        2,
    )
    shutil.copytree(tmp_path / "runs" / "tiny" / "default.seed1", tmp_path / "copy")
    (tmp_path / "runs").rename(tmp_path / "moved")
    command(BIN / "fairseq-ln-evaluate", tmp_path / "copy")
    result = json.loads((tmp_path / "copy" / "results.json").read_text())
    assert result["checkpoints"] == [str(tmp_path / "copy" / "checkpoints" / "checkpoint_last.pt")]
    assert result["sentences"] == 40 and not list((tmp_path / "moved").rglob("results.json"))


def test_a_run_json_with_an_absolute_save_dir_reads_the_checkpoints_beside_it(tmp_path):
    """run.json files written before save dirs were recorded relative name the absolute path
    of the folder they were trained in: a copy of such a run reads its own checkpoints."""
    (tmp_path / "copy" / "checkpoints").mkdir(parents=True)
    record = {"save_dir": str(tmp_path / "original" / "checkpoints")}
    assert run_save_dir(tmp_path / "copy", record) == tmp_path / "copy" / "checkpoints"
    assert run_save_dir(tmp_path / "copy", {"save_dir": "checkpoints"}) == tmp_path / "copy" / "checkpoints"
    elsewhere = {"save_dir": str(tmp_path / "scratch" / "ckpt")}  # a save dir outside the run stays where it is
    assert run_save_dir(tmp_path / "copy", elsewhere) == tmp_path / "scratch" / "ckpt"
