"""Admin -> plain Post-LN export (Liu et al. 2020, App. C): same outputs, stock fairseq."""

import os
import re

import pytest
import torch
from conftest import PLUGIN_DIR, TINY_MODEL, batch, build, run_cli
from fairseq.models.transformer import TransformerModel

from fairseq_layernorm_plugins.admin_export import fold_admin_state_dict

ARCH = "transformer_admin_iwslt_de_en"


@pytest.mark.parametrize("flags", [[], ["--share-decoder-input-output-embed"], ["--layernorm-embedding"]])
def test_folded_model_computes_the_same_function(tiny_data_bin, flags):
    """Plain, tied and LayerNorm-ed embeddings each fold exactly."""
    model, task, args = build(tiny_data_bin, ARCH, *TINY_MODEL, "--encoder-layers", "3", *flags)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # trained-looking omega (first sub-layers included) and LayerNorms
        for name, p in model.named_parameters():
            if name.endswith("omega"):
                p.copy_(0.5 + 2 * torch.rand(p.shape, generator=gen))
            elif "layer_norm" in name or "layernorm" in name:
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
    model.eval()
    state, plain_args = fold_admin_state_dict(model.state_dict(), args)
    plain = TransformerModel.build_model(plain_args, task)
    assert type(plain) is TransformerModel
    plain.load_state_dict(state, strict=True)
    plain.eval()
    net = batch(task, n=8)["net_input"]
    with torch.no_grad():
        ours = model.get_normalized_probs(model(**net), log_probs=True)
        theirs = plain.get_normalized_probs(plain(**net), log_probs=True)
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)
    assert not any("omega" in k for k in state)


def test_projected_embeddings_are_refused(tiny_data_bin):
    model, _, args = build(tiny_data_bin, ARCH, *TINY_MODEL)
    state = {**model.state_dict(), "decoder.project_in_dim.weight": torch.zeros(32, 16)}
    with pytest.raises(ValueError, match="decoder: embeddings projected to the model width"):
        fold_admin_state_dict(state, args)


def test_exported_checkpoint_decodes_with_stock_fairseq(tiny_data_bin, tmp_path):
    save = tmp_path / "ckpt"
    run_cli(
        "fairseq-train",
        tiny_data_bin,
        "--user-dir",
        PLUGIN_DIR,
        "--arch",
        ARCH,
        *TINY_MODEL,
        "--share-decoder-input-output-embed",
        "--optimizer",
        "radam",
        "--lr",
        "3e-3",
        "--max-tokens",
        "1000",
        "--max-update",
        "40",
        "--cpu",
        "--seed",
        "1",
        "--save-dir",
        save,
        "--no-epoch-checkpoints",
        "--no-progress-bar",
    )
    run_cli("python", REPO_SCRIPT, save / "checkpoint_last.pt", tmp_path / "plain.pt")
    common = ["--gen-subset", "test", "--beam", "3", "--batch-size", "16", "--cpu"]
    admin = run_cli(
        "fairseq-generate", tiny_data_bin, "--user-dir", PLUGIN_DIR, "--path", save / "checkpoint_last.pt", *common
    )
    # stock fairseq: no --user-dir; only torch>=2.6's documented switch for fairseq checkpoints
    env = {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    stock = run_cli("fairseq-generate", tiny_data_bin, "--path", tmp_path / "plain.pt", *common, env=env)
    assert "fairseq_layernorm_plugins" not in stock

    def hypotheses(out):
        return {m[0]: (float(m[1]), m[2]) for m in re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", out, re.M)}

    ours, theirs = hypotheses(admin), hypotheses(stock)
    assert len(ours) == 40 and ours.keys() == theirs.keys()
    for i in ours:
        assert theirs[i][1] == ours[i][1], i  # same translation
        assert theirs[i][0] == pytest.approx(ours[i][0], abs=2e-4), i  # same score (printed to 4 decimals)


REPO_SCRIPT = PLUGIN_DIR.parent / "scripts" / "export_admin_to_postln.py"
