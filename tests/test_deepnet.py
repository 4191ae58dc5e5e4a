"""DeepNet / DeepNorm (Wang et al. 2022): residual weight alpha, init gain beta."""

import math

import pytest
import torch
from conftest import build, ffn

# (N, M) -> encoder (alpha, beta), decoder (alpha, beta), computed by hand from Table 1:
# encoder 0.81 (N^4 M)^(1/16), 0.87 (N^4 M)^(-1/16); decoder (3M)^(1/4), (12M)^(-1/4)
EXPECTED = {
    (6, 6): ((1.41792, 0.49700), (2.05977, 0.34329)),
    (18, 18): ((1.99877, 0.35256), (2.71081, 0.26084)),
}


def dims(layers, d=64, ffn_dim=128):
    return [
        "--encoder-embed-dim",
        d,
        "--decoder-embed-dim",
        d,
        "--encoder-ffn-embed-dim",
        ffn_dim,
        "--decoder-ffn-embed-dim",
        ffn_dim,
        "--encoder-layers",
        layers,
        "--decoder-layers",
        layers,
        "--encoder-attention-heads",
        4,
        "--decoder-attention-heads",
        4,
    ]


def xavier_normal_std(fan_in, fan_out, gain):
    return gain * math.sqrt(2.0 / (fan_in + fan_out))


@pytest.mark.parametrize("depth", [6, 18])
def test_alpha_and_init_gains(tiny_data_bin, depth):
    model = build(tiny_data_bin, "transformer_deepnet_wmt_en_de", *dims(depth))[0]
    for stack, (alpha, beta) in zip(("encoder", "decoder"), EXPECTED[depth, depth]):
        layers = getattr(model, stack).layers
        assert all(layer.alpha == pytest.approx(alpha, abs=1e-4) for layer in layers)
        attns = [lay.self_attn for lay in layers] + ([lay.encoder_attn for lay in layers] if stack == "decoder" else [])
        for kind, gain in (("v_proj", beta), ("out_proj", beta), ("q_proj", 1.0), ("k_proj", 1.0)):
            w = torch.cat([getattr(a, kind).weight.detach().flatten() for a in attns])
            assert w.std().item() == pytest.approx(xavier_normal_std(64, 64, gain), rel=0.03), (stack, kind)
        for kind in ("fc1", "fc2"):
            w = torch.cat([getattr(lay, kind).weight.detach().flatten() for lay in layers])
            assert w.std().item() == pytest.approx(xavier_normal_std(64, 128, beta), rel=0.03), (stack, kind)


def test_encoder_layer_equation(tiny_data_bin):
    """x1 = LN(alpha x + Attn(x)); out = LN(alpha x1 + FFN(x1))."""
    model = build(tiny_data_bin, "transformer_deepnet_wmt_en_de", *dims(6))[0].eval()
    layer, alpha = model.encoder.layers[0], EXPECTED[6, 6][0][0]
    x, pad = torch.randn(5, 3, 64), torch.zeros(3, 5, dtype=torch.bool)
    x1 = layer.self_attn_layer_norm(alpha * x + layer.self_attn(x, x, x, key_padding_mask=pad, need_weights=False)[0])
    expected = layer.final_layer_norm(alpha * x1 + ffn(layer, x1))
    torch.testing.assert_close(layer(x, pad), expected, atol=1e-4, rtol=1e-4)


def test_post_ln_only(tiny_data_bin):
    with pytest.raises(ValueError, match="decoder-normalize-before .*Post-LN"):
        build(tiny_data_bin, "transformer_deepnet_iwslt_de_en", "--decoder-normalize-before")
