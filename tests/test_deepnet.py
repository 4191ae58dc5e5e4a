"""DeepNet / DeepNorm (Wang et al. 2022): residual weight alpha, init gain beta."""

import math

import pytest
import torch
from conftest import build, ffn, hand_set_layer_norms

# (N, M) -> encoder (alpha, beta), decoder (alpha, beta), computed by hand from Table 1:
# encoder 0.81 (N^4 M)^(1/16), 0.87 (N^4 M)^(-1/16); decoder (3M)^(1/4), (12M)^(-1/4).
# (12, 6) and (6, 12) tell N from M: swapping them turns the encoder's 1.68622 into 1.48072,
# and a decoder that read the encoder's depth would get 2.44949 instead of 2.05977.
EXPECTED = {
    (6, 6): ((1.41792, 0.49700), (2.05977, 0.34329)),
    (12, 6): ((1.68622, 0.41792), (2.05977, 0.34329)),
    (6, 12): ((1.48072, 0.47592), (2.44949, 0.28868)),
    (18, 18): ((1.99877, 0.35256), (2.71081, 0.26084)),
}


def dims(encoder_layers, decoder_layers, d=64, ffn_dim=128):
    return [
        *("--encoder-embed-dim", d, "--decoder-embed-dim", d),
        *("--encoder-ffn-embed-dim", ffn_dim, "--decoder-ffn-embed-dim", ffn_dim),
        *("--encoder-layers", encoder_layers, "--decoder-layers", decoder_layers),
        *("--encoder-attention-heads", 4, "--decoder-attention-heads", 4),
    ]


def xavier_normal_std(fan_in, fan_out, gain):
    return gain * math.sqrt(2.0 / (fan_in + fan_out))


@pytest.mark.parametrize("depths", list(EXPECTED), ids=lambda d: f"{d[0]}L-{d[1]}L")
def test_alpha_and_init_gains(tiny_data_bin, depths):
    model = build(tiny_data_bin, "transformer_deepnet_wmt_en_de", *dims(*depths))[0]
    for stack, (alpha, beta) in zip(("encoder", "decoder"), EXPECTED[depths]):
        layers = getattr(model, stack).layers
        assert all(layer.alpha == pytest.approx(alpha, abs=1e-4) for layer in layers)
        attns = [lay.self_attn for lay in layers] + ([lay.encoder_attn for lay in layers] if stack == "decoder" else [])
        for kind, gain in (("v_proj", beta), ("out_proj", beta), ("q_proj", 1.0), ("k_proj", 1.0)):
            w = torch.cat([getattr(a, kind).weight.detach().flatten() for a in attns])
            assert w.std().item() == pytest.approx(xavier_normal_std(64, 64, gain), rel=0.03), (stack, kind)
        for kind in ("fc1", "fc2"):
            w = torch.cat([getattr(lay, kind).weight.detach().flatten() for lay in layers])
            assert w.std().item() == pytest.approx(xavier_normal_std(64, 128, beta), rel=0.03), (stack, kind)


@pytest.fixture(scope="module")
def deepnet_12_6(tiny_data_bin):
    """A 12L-6L DeepNet in eval mode, every LayerNorm with its own gamma and beta."""
    return hand_set_layer_norms(build(tiny_data_bin, "transformer_deepnet_wmt_en_de", *dims(12, 6))[0]).eval()


def test_encoder_layer_equation(deepnet_12_6):
    """x1 = LN1(alpha x + Attn(x)); out = LN2(alpha x1 + FFN(x1)), alpha = 0.81 (12^4 6)^(1/16)."""
    layer, alpha = deepnet_12_6.encoder.layers[-1], EXPECTED[12, 6][0][0]
    x, pad = torch.randn(5, 3, 64), torch.zeros(3, 5, dtype=torch.bool)
    pad[1, -2:] = True
    x1 = layer.self_attn_layer_norm(alpha * x + layer.self_attn(x, x, x, key_padding_mask=pad, need_weights=False)[0])
    expected = layer.final_layer_norm(alpha * x1 + ffn(layer, x1))
    torch.testing.assert_close(layer(x, pad), expected, atol=1e-4, rtol=1e-4)


def test_decoder_layer_equation(deepnet_12_6):
    """x1 = LN(alpha x + SelfAttn(x)); x2 = LN(alpha x1 + CrossAttn(x1)); out = LN(alpha x2 + FFN(x2)),
    alpha = (3 * 6)^(1/4), each LN its own."""
    layer, alpha = deepnet_12_6.decoder.layers[-1], EXPECTED[12, 6][1][0]
    x, enc = torch.randn(4, 2, 64), torch.randn(6, 2, 64)
    causal = torch.triu(torch.full((4, 4), float("-inf")), 1)
    x1 = layer.self_attn_layer_norm(alpha * x + layer.self_attn(x, x, x, attn_mask=causal, need_weights=False)[0])
    x2 = layer.encoder_attn_layer_norm(alpha * x1 + layer.encoder_attn(x1, enc, enc, need_weights=False)[0])
    expected = layer.final_layer_norm(alpha * x2 + ffn(layer, x2))
    out = layer(x, encoder_out=enc, encoder_padding_mask=None, self_attn_mask=causal)[0]
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


def test_post_ln_only(tiny_data_bin):
    with pytest.raises(ValueError, match="decoder-normalize-before .*Post-LN"):
        build(tiny_data_bin, "transformer_deepnet_iwslt_de_en", "--decoder-normalize-before")
