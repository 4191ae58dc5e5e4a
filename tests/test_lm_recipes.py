"""Language-model recipes (``configs/wikitext103/``): the B2T paper's Table 3 setting flag by
flag, and a language-model recipe trained, scored by fairseq-eval-lm and put in a table."""

import pytest
from conftest import LM_WORDS

from fairseq_layernorm_plugins.experiments.report import collect, render, table_rows
from fairseq_layernorm_plugins.methods import method_names
from fairseq_layernorm_plugins.recipes.config import load_recipe
from fairseq_layernorm_plugins.runs.evaluate import evaluate
from fairseq_layernorm_plugins.runs.launch import Launch, train
from fairseq_layernorm_plugins.runs.perplexity import read_eval_lm

# B2T (Takase et al. 2023) Table 3, perplexity (valid, test) on WikiText-103
TABLE_3 = {
    "postln": {"6L": {"valid": 20.24, "test": 21.22}, "16L": "failed"},
    "preln": {"6L": {"valid": 20.98, "test": 21.93}, "16L": {"valid": 18.53, "test": 19.24}},
    "b2t": {"6L": {"valid": 20.50, "test": 21.47}, "16L": {"valid": 18.38, "test": 19.20}},
}
GPUS = {"6L": 128, "16L": 192}  # B2T Table 8


def options(flags):
    """{flag: value, or True for a switch} of a fairseq-train command line (after the data)."""
    out, key = {}, None
    for token in flags[1:]:
        if token.startswith("--"):
            key = token
            out[key] = True
        else:
            out[key] = token if out[key] is True else f"{out[key]} {token}"
    return out


def test_every_method_has_its_language_model_recipes():
    """Each registered method's language model is in the B2T setting and its CPU-scale copy."""
    assert method_names("wikitext103") == method_names("wikitext2") == method_names()


@pytest.mark.parametrize("method", method_names("wikitext103"))
def test_wikitext103_recipe_is_the_b2t_papers_setting(method):
    """Table 7: Adam (0.9, 0.98), lr 1e-3, inverse sqrt from 2k warm-up, 50k updates, 1024 tokens
    per GPU, on 128 GPUs at 6L and 192 at 16L (Table 8), here spread over 8 GPUs; Baevski and
    Auli's adaptive-input model (d 1024, FFN 4096, 8 heads) at the depth's decoder layers."""
    for depth, gpus in GPUS.items():
        recipe = load_recipe(f"wikitext103/{method}").with_depth(depth)
        flags = options(Launch(recipe, "data-bin/wikitext-103", "ckpt", gpus=8).fairseq_args())
        assert flags["--task"] == "language_modeling" and flags["--arch"] == f"transformer_lm_{method}_wiki103"
        assert flags["--decoder-layers"] == depth[:-1] and "--encoder-layers" not in flags
        assert (flags["--optimizer"], flags["--adam-betas"], flags["--lr"]) == ("adam", "(0.9, 0.98)", "0.001")
        assert (flags["--lr-scheduler"], flags["--warmup-updates"]) == ("inverse_sqrt", "2000")
        assert flags["--max-update"] == "50000" and flags["--max-tokens"] == "1024"
        assert int(flags["--update-freq"]) * 8 == gpus and flags["--distributed-world-size"] == "8"
        assert flags["--criterion"] == "adaptive_loss" and flags["--ddp-backend"] == "legacy_ddp"
        assert ("--no-decoder-final-norm" in flags) is (method == "preln")  # fairseq's wiki103 LM, as the fork ran it
        paper = recipe.data["paper"]
        if method in TABLE_3:
            assert paper["perplexity"][depth] == TABLE_3[method][depth] and "Table 3" in paper["source"]
        else:
            assert paper is None


@pytest.fixture
def tiny_lm_recipe(tmp_path):
    """A tiny language-model recipe under tmp_path/configs/lmtiny/b2t.yaml, with made-up
    paper numbers for the table."""
    folder = tmp_path / "configs" / "lmtiny"
    folder.mkdir(parents=True)
    (folder / "b2t.yaml").write_text(
        """
tokens_per_update: 256
depths: {2L: {}}
generate: {checkpoint: best, eval_lm: {batch_size: 4, tokens_per_sample: 16, context_window: 8}}
fairseq:
  task: {_name: language_modeling, tokens_per_sample: 32, sample_break_mode: none}
  model: {_name: transformer_lm_b2t, decoder_embed_dim: 32, decoder_ffn_embed_dim: 64, decoder_attention_heads: 2}
  criterion: {_name: cross_entropy}
  optimizer: {_name: adam}
  lr_scheduler: {_name: fixed}
  optimization: {lr: [0.01], max_update: 60}
  dataset: {max_tokens: 256}
  checkpoint: {save_interval_updates: 20}
  common: {log_format: json, log_interval: 10, seed: 1}
paper: {source: made up, metric: perplexity, perplexity: {2L: {valid: 3.0, test: 4.0}}}
"""
    )
    return load_recipe("lmtiny/b2t", config_dir=tmp_path / "configs").with_depth()


def test_language_model_recipe_trains_is_scored_and_tabulated(lm_data_bin, tiny_lm_recipe, tmp_path):
    run_dir = tmp_path / "runs" / "lmtiny" / "b2t"
    train(Launch(tiny_lm_recipe, str(lm_data_bin), str(run_dir / "checkpoints"), cpu_workers=1), run_dir)
    result = evaluate(run_dir, echo=lambda *a: None)
    assert result["checkpoints"] == [str(run_dir / "checkpoints" / "checkpoint_best.pt")]
    for subset, ppl in result["perplexity"].items():
        lines = (lm_data_bin.parent / f"{subset}.txt").read_text().splitlines()
        assert ppl["tokens"] == sum(len(line.split()) + 1 for line in lines)  # every word and each line's end
        assert ppl["score"] == pytest.approx(2 ** ppl["loss_bits"], abs=0.01)
        assert 1 < ppl["score"] < len(LM_WORDS) / 2  # the next word is learnable: far below uniform
    rows = table_rows(collect([tmp_path / "runs"]), "lmtiny")
    assert [(r.method, r.depth, r.paper_value) for r in rows] == [("b2t", "2L valid", 3.0), ("b2t", "2L test", 4.0)]
    assert [r.mean for r in rows] == [result["perplexity"][s]["score"] for s in ("valid", "test")]
    markdown, table_csv = render(rows, "lmtiny")
    assert "2L valid ours" in markdown and f"{rows[1].mean - 4.0:+.2f}" in markdown
    assert f"b2t,2L test,{rows[1].mean:.2f}," in table_csv


def test_eval_lm_log_without_a_result_is_one_line_naming_it(tmp_path):
    log = tmp_path / "eval-lm-test.log"
    log.write_text("2026-01-01 | INFO | fairseq_cli.eval_lm | loading model(s)\n")
    with pytest.raises(ValueError, match=r"eval-lm-test\.log: no 'Evaluated"):
        read_eval_lm(log)
