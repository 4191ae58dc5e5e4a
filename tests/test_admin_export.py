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


# no TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD: every load below is torch's safe one (weights_only=True)
SAFE_ENV = {k: v for k, v in os.environ.items() if k != "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"}


@pytest.fixture(scope="module")
def exported(tiny_data_bin, tmp_path_factory):
    """(Admin checkpoint, its export): 40 updates of Admin, then the export script."""
    root = tmp_path_factory.mktemp("export")
    save = root / "ckpt"
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
        env=SAFE_ENV,
    )
    run_cli("python", REPO_SCRIPT, save / "checkpoint_last.pt", root / "plain.pt", env=SAFE_ENV)
    return save / "checkpoint_last.pt", root / "plain.pt"


def hypotheses(out):
    return {m[0]: (float(m[1]), m[2]) for m in re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", out, re.M)}


def test_exported_checkpoint_decodes_with_stock_fairseq(tiny_data_bin, exported):
    admin_checkpoint, plain = exported
    # tensors and plain containers only: stock fairseq loads it with torch's safe default
    assert torch.serialization.get_unsafe_globals_in_checkpoint(plain) == []
    common = ["--gen-subset", "test", "--beam", "3", "--batch-size", "16", "--cpu"]
    admin = run_cli(
        "fairseq-generate", tiny_data_bin, "--user-dir", PLUGIN_DIR, "--path", admin_checkpoint, *common, env=SAFE_ENV
    )
    stock = run_cli("fairseq-generate", tiny_data_bin, "--path", plain, *common, env=SAFE_ENV)  # no --user-dir
    assert "fairseq_layernorm_plugins" not in stock

    ours, theirs = hypotheses(admin), hypotheses(stock)
    assert len(ours) == 40 and ours.keys() == theirs.keys()  # 40 = 16 + 16 + 8: no batch dropped
    for i in ours:
        assert theirs[i][1] == ours[i][1], i  # same translation
        assert theirs[i][0] == pytest.approx(ours[i][0], abs=2e-4), i  # same score (printed to 4 decimals)


def test_exported_checkpoint_translates_every_sentence_under_the_plugin(tiny_data_bin, exported):
    """Batches of 6: stock fairseq-fixed drops the last 4 of the 40 test sentences, as its
    docstring says; with ``--user-dir fairseq_layernorm_plugins`` the exported model, a stock
    ``transformer``, translates all 40."""
    _, plain = exported
    common = ["--path", plain, "--gen-subset", "test", "--beam", "1", "--batch-size", "6", "--cpu"]
    with_plugin = hypotheses(
        run_cli("fairseq-generate", tiny_data_bin, "--user-dir", PLUGIN_DIR, *common, env=SAFE_ENV)
    )
    assert sorted(map(int, with_plugin)) == list(range(40))
    stock = hypotheses(run_cli("fairseq-generate", tiny_data_bin, *common, env=SAFE_ENV))
    if len(stock) == 40:
        pytest.skip("this fairseq keeps the last batch itself")
    assert len(stock) == 36


REPO_SCRIPT = PLUGIN_DIR.parent / "scripts" / "export_admin_to_postln.py"
