"""T-Fixup (Huang et al. 2020): no LayerNorm anywhere, and the initialisation's scales."""

import math

import pytest
import torch
from conftest import build

from layernorm_methods.methods.tfixup import (
    tfixup_decoder_scale,
    tfixup_encoder_embedding_scale,
    tfixup_encoder_scale,
)

D, FFN, N_E, N_D = 64, 128, 2, 6  # distinct depths, so encoder and decoder factors differ
DIMS = [
    "--encoder-embed-dim",
    D,
    "--decoder-embed-dim",
    D,
    "--encoder-ffn-embed-dim",
    FFN,
    "--decoder-ffn-embed-dim",
    FFN,
    "--encoder-layers",
    N_E,
    "--decoder-layers",
    N_D,
    "--encoder-attention-heads",
    4,
    "--decoder-attention-heads",
    4,
]


def xavier_std(fan_in, fan_out, gain=1.0):
    return gain * math.sqrt(2.0 / (fan_in + fan_out))


def pooled_std(tensors):
    return torch.cat([t.detach().flatten() for t in tensors]).std().item()


@pytest.fixture(scope="module")
def model(tiny_data_bin):
    return build(tiny_data_bin, "transformer_tfixup_iwslt_de_en", *DIMS)[0]


def test_factors():
    assert tfixup_decoder_scale(6) == pytest.approx(54**-0.25)
    assert tfixup_encoder_scale(6) == pytest.approx(0.67 / 6**0.25)
    assert tfixup_encoder_embedding_scale(2) == pytest.approx(18**-0.25)


def test_no_layer_norm_anywhere(model):
    assert not [n for n, m in model.named_modules() if "LayerNorm" in type(m).__name__]
    assert not [n for n, _ in model.named_parameters() if "norm" in n]
    assert model.encoder.layer_norm is None and model.decoder.layer_norm is None
    assert model.encoder.layernorm_embedding is None and model.decoder.layernorm_embedding is None


@pytest.mark.parametrize("stack, scale", [("encoder", 0.67 * N_E**-0.25), ("decoder", (9 * N_D) ** -0.25)])
def test_scaled_matrices_std(model, stack, scale):
    """Measured std of each scaled matrix kind = Xavier std from fan-in/out x factor."""
    layers = getattr(model, stack).layers
    attns = [lay.self_attn for lay in layers] + ([lay.encoder_attn for lay in layers] if stack == "decoder" else [])
    for kind, weights, fans in [
        ("v_proj", [a.v_proj.weight for a in attns], (D, D)),
        ("out_proj", [a.out_proj.weight for a in attns], (D, D)),
        ("fc1", [lay.fc1.weight for lay in layers], (D, FFN)),
        ("fc2", [lay.fc2.weight for lay in layers], (FFN, D)),
    ]:
        assert pooled_std(weights) == pytest.approx(xavier_std(*fans) * scale, rel=0.03), kind
    for layer in layers:
        assert torch.all(layer.fc1.bias == 0) and torch.all(layer.fc2.bias == 0)


@pytest.mark.parametrize("stack", ["encoder", "decoder"])
def test_query_key_untouched(model, stack):
    """q/k keep fairseq's Xavier-uniform with gain 1/sqrt(2)."""
    layers = getattr(model, stack).layers
    attns = [lay.self_attn for lay in layers] + ([lay.encoder_attn for lay in layers] if stack == "decoder" else [])
    for kind in ("q_proj", "k_proj"):
        std = pooled_std([getattr(a, kind).weight for a in attns])
        assert std == pytest.approx(xavier_std(D, D, gain=2**-0.5), rel=0.03), kind


@pytest.mark.parametrize("stack, factor", [("encoder", (9 * N_E) ** -0.25), ("decoder", (9 * N_D) ** -0.25)])
def test_embedding_std(model, stack, factor):
    embed = getattr(model, stack).embed_tokens
    weight = embed.weight.detach()
    assert torch.all(weight[embed.padding_idx] == 0)
    rows = torch.cat([weight[: embed.padding_idx], weight[embed.padding_idx + 1 :]])
    assert rows.std().item() == pytest.approx(D**-0.5 * factor, rel=0.05)


def test_shared_embeddings_scaled_once_by_the_encoder_factor(joined_data_bin):
    model = build(joined_data_bin, "transformer_tfixup_iwslt_de_en", *DIMS, "--share-all-embeddings")[0]
    embed = model.encoder.embed_tokens
    assert embed.weight is model.decoder.embed_tokens.weight
    rows = torch.cat([embed.weight[: embed.padding_idx], embed.weight[embed.padding_idx + 1 :]]).detach()
    assert rows.std().item() == pytest.approx(D**-0.5 * (9 * N_E) ** -0.25, rel=0.05)


@pytest.mark.parametrize("flag", ["--encoder-normalize-before", "--layernorm-embedding"])
def test_layer_norm_flags_rejected(tiny_data_bin, flag):
    with pytest.raises(ValueError, match="T-Fixup has no LayerNorm"):
        build(tiny_data_bin, "transformer_tfixup_iwslt_de_en", *DIMS, flag)


@pytest.mark.parametrize("stack", ["encoder", "decoder"])
def test_qkv_biases_as_the_authors_fork(model, stack):
    """--tfixup-qkv-bias fork (default): the fork's separate q/k/v nn.Linear keep their
    default bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (std bound/sqrt(3)); fc/out biases zero."""
    layers = getattr(model, stack).layers
    attns = [lay.self_attn for lay in layers] + ([lay.encoder_attn for lay in layers] if stack == "decoder" else [])
    bound = D**-0.5
    for kind in ("q_proj", "k_proj", "v_proj"):
        bias = torch.cat([getattr(a, kind).bias.detach() for a in attns])
        assert bias.abs().max() <= bound and bias.std().item() == pytest.approx(bound / 3**0.5, rel=0.15), kind
    assert all(torch.all(a.out_proj.bias == 0) for a in attns)


@pytest.mark.parametrize("init_style", ["paper", "fairseq"])
def test_qkv_bias_zero_option_and_init_style_has_no_say(tiny_data_bin, init_style):
    """--tfixup-qkv-bias zero zeroes them whatever --init-style; fc1/fc2 are T-Fixup's own
    Xavier with zero bias under both styles."""
    model = build(
        tiny_data_bin, "transformer_tfixup_iwslt_de_en", *DIMS, "--tfixup-qkv-bias", "zero", "--init-style", init_style
    )[0]
    for layer in list(model.encoder.layers) + list(model.decoder.layers):
        attns = [layer.self_attn] + ([layer.encoder_attn] if getattr(layer, "encoder_attn", None) is not None else [])
        assert all(torch.all(getattr(a, kind).bias == 0) for a in attns for kind in ("q_proj", "k_proj", "v_proj"))
        assert torch.all(layer.fc1.bias == 0) and torch.all(layer.fc2.bias == 0)
    fork = build(tiny_data_bin, "transformer_tfixup_iwslt_de_en", *DIMS, "--init-style", init_style)[0]
    assert fork.encoder.layers[0].self_attn.q_proj.bias.abs().sum() > 0
