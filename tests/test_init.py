"""--init-style: each method's authors' initialisation by default (fairseq 0.8/0.9's, or fairseq
0.12's for B2T, whose fork builds nn.Linear FFNs), the other on request."""

import pytest
import torch
from conftest import build

from fairseq_layernorm_plugins.models.base import ARCH_FAMILIES
from fairseq_layernorm_plugins.modules import attentions, stack_layers

WIDE = [
    "--encoder-embed-dim",
    128,
    "--decoder-embed-dim",
    128,
    "--encoder-ffn-embed-dim",
    512,
    "--decoder-ffn-embed-dim",
    512,
]


def layers(model):
    return stack_layers(model.encoder) + stack_layers(model.decoder)


def test_postln_with_fairseq_style_is_stock_transformer_parameter_for_parameter(tiny_data_bin):
    ours, _, _ = build(tiny_data_bin, "transformer_postln", "--init-style", "fairseq")
    stock, _, _ = build(tiny_data_bin, "transformer")
    theirs = stock.state_dict()
    assert ours.state_dict().keys() == theirs.keys()
    for name, value in ours.state_dict().items():
        assert torch.equal(value, theirs[name]), name


@pytest.mark.parametrize("model", sorted(set(ARCH_FAMILIES) - {"transformer_tfixup", "transformer_deepnet"}))
def test_paper_style_ffn_is_xavier_uniform_with_zero_biases(tiny_data_bin, model):
    """fc1/fc2 ~ U(+-sqrt(6 / (fan_in + fan_out))), biases 0; q/k/v biases 0 (fairseq 0.8).
    T-Fixup and DeepNet re-draw fc1/fc2; Sub-LN is built without Magneto's gain, which scales them."""
    extra = ("--subln-init", "none") if model == "transformer_subln" else ()
    paper, _, _ = build(tiny_data_bin, model, *WIDE, *extra, "--init-style", "paper")
    fairseq_style, _, _ = build(tiny_data_bin, model, *WIDE, *extra, "--init-style", "fairseq")
    for layer, stock_layer in zip(layers(paper), layers(fairseq_style)):
        for fc, stock_fc in ((layer.fc1, stock_layer.fc1), (layer.fc2, stock_layer.fc2)):
            fan_out, fan_in = fc.weight.shape
            bound = (6 / (fan_in + fan_out)) ** 0.5
            assert fc.weight.abs().max() <= bound and fc.weight.abs().max() > 0.95 * bound
            assert fc.weight.var().item() == pytest.approx(2 / (fan_in + fan_out), rel=0.1)
            assert torch.count_nonzero(fc.bias) == 0
            # fairseq 0.12 (nn.Linear): variance 1 / (3 fan_in), a nonzero bias
            assert stock_fc.weight.var().item() == pytest.approx(1 / (3 * fan_in), rel=0.1)
            assert torch.count_nonzero(stock_fc.bias) == stock_fc.bias.numel()
        for attn in attentions(layer):
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
                assert torch.count_nonzero(proj.bias) == 0


def test_method_initialisation_applies_on_top_of_the_style(tiny_data_bin):
    """B2T's N^-0.5 rescale multiplies the paper-style weights: same seed, exact factor."""
    plain, _, _ = build(tiny_data_bin, "transformer_b2t", *WIDE, "--init-style", "paper")
    rescaled, _, _ = build(tiny_data_bin, "transformer_b2t", *WIDE, "--init-style", "paper", "--b2t-weight-rescale")
    n = len(plain.encoder.layers)
    for a, b in zip(layers(plain)[:n], layers(rescaled)[:n]):
        assert torch.allclose(b.fc1.weight, a.fc1.weight * n**-0.5) and torch.count_nonzero(b.fc1.bias) == 0


@pytest.mark.parametrize("model", sorted(ARCH_FAMILIES))
def test_default_style_is_the_authors_own(tiny_data_bin, model):
    """B2T's fork (takase/b2t_connection) and ResiDual's plugin (microsoft/ResiDual, on fairseq
    0.12.2) build fc1/fc2 as nn.Linear: fairseq 0.12's style, the same parameters as asking for
    it; every other method: fairseq 0.8/0.9's, which the seed papers ran."""
    default, _, args = build(tiny_data_bin, model, *WIDE)
    expected = "fairseq" if model in ("transformer_b2t", "transformer_residual") else "paper"
    assert args.init_style == expected
    explicit, _, _ = build(tiny_data_bin, model, *WIDE, "--init-style", expected)
    for name, value in default.state_dict().items():
        assert torch.equal(value, explicit.state_dict()[name]), name
    if expected == "fairseq":
        fc1 = default.encoder.layers[0].fc1
        assert fc1.weight.var().item() == pytest.approx(1 / (3 * fc1.in_features), rel=0.1)


def test_unknown_style_is_refused(tiny_data_bin):
    with pytest.raises(SystemExit):
        build(tiny_data_bin, "transformer_postln", "--init-style", "xavier")


@pytest.mark.parametrize("model", ["transformer_tfixup", "transformer_deepnet"])
def test_rescaled_methods_start_with_zero_biases(tiny_data_bin, model):
    """T-Fixup and DeepNet re-initialise the weights; their fc1/fc2 and out_proj biases start at
    0, and DeepNet's q/k/v biases too under --init-style paper (its default here); T-Fixup's
    q/k/v biases are its fork's nn.Linear default (tests/test_tfixup.py), and torchscale's
    DeepNet keeps default biases (tests/test_deepnet_init.py)."""
    built, _, _ = build(tiny_data_bin, model, *WIDE)
    biases = {
        name: p
        for name, p in built.named_parameters()
        if ".layers." in name and name.endswith(("proj.bias", "fc1.bias", "fc2.bias"))
    }
    # per encoder layer fc1, fc2, self-attention q/k/v/out; per decoder layer also the cross-attention's
    assert len(biases) == 6 * len(built.encoder.layers) + 10 * len(built.decoder.layers)
    qkv = ("q_proj.bias", "k_proj.bias", "v_proj.bias")
    zero = {n: p for n, p in biases.items() if model != "transformer_tfixup" or not n.endswith(qkv)}
    assert all(torch.count_nonzero(p) == 0 for p in zero.values())
