"""B2T connection (Takase et al. 2023): the layer equations, incremental decoding,
the LayerNorm-free variant and the optional N^-0.5 rescaling."""

import pytest
import torch
from conftest import TINY_MODEL, batch, build, ffn, hand_set_layer_norms

from layernorm_methods.methods.b2t import b2t_no_ln_alpha, b2t_no_ln_beta

ARCH = "transformer_b2t_iwslt_de_en"


def attend(attn, query, memory, **kwargs):
    return attn(query, memory, memory, need_weights=False, **kwargs)[0]


def test_no_ln_constants_from_the_paper():
    assert b2t_no_ln_alpha(6) == pytest.approx(0.5)  # N/12 is the smaller one below N = 9
    assert b2t_no_ln_alpha(18) == pytest.approx(18**-0.15)
    assert b2t_no_ln_alpha(60) == pytest.approx(60**-0.15)
    assert b2t_no_ln_beta(512) == pytest.approx(512**-0.2)


def test_encoder_layer_equation(tiny_data_bin):
    """h = LN1(x + Attn(x)); out = LN2(x + h + FFN(h))  (Eq. 5)."""
    model = build(tiny_data_bin, ARCH, *TINY_MODEL)[0].eval()
    hand_set_layer_norms(model)
    layer = model.encoder.layers[-1]  # the last layer has it too
    x, pad = torch.randn(5, 3, 32), torch.zeros(3, 5, dtype=torch.bool)
    pad[1, -2:] = True
    h = layer.self_attn_layer_norm(x + attend(layer.self_attn, x, x, key_padding_mask=pad))
    expected = layer.final_layer_norm(x + h + ffn(layer, h))
    torch.testing.assert_close(layer(x, pad), expected)


def test_decoder_layer_equation(tiny_data_bin):
    """h1 = LN(x + SelfAttn(x)); h2 = LN(h1 + CrossAttn(h1)); out = LN(x + h2 + FFN(h2))."""
    model = build(tiny_data_bin, ARCH, *TINY_MODEL)[0].eval()
    hand_set_layer_norms(model)
    layer = model.decoder.layers[-1]
    x, enc = torch.randn(4, 2, 32), torch.randn(6, 2, 32)
    causal = torch.triu(torch.full((4, 4), float("-inf")), 1)
    h1 = layer.self_attn_layer_norm(x + attend(layer.self_attn, x, x, attn_mask=causal))
    h2 = layer.encoder_attn_layer_norm(h1 + attend(layer.encoder_attn, h1, enc))
    expected = layer.final_layer_norm(x + h2 + ffn(layer, h2))
    out = layer(x, encoder_out=enc, encoder_padding_mask=None, self_attn_mask=causal)[0]
    torch.testing.assert_close(out, expected)


def test_no_layer_norm_variant(tiny_data_bin):
    """w/o LN (App. D): no LayerNorm at all; out = alpha x + beta (h + FFN(h)), h = x + Attn(x),
    with each stack's own N and d: a 12-layer encoder of width 32 takes the N^-0.15 branch of
    alpha = min(N/12, N^-0.15), a 3-layer decoder of width 48 the N/12 one."""
    dims = ["--encoder-layers", 12, "--decoder-layers", 3, "--decoder-embed-dim", 48, "--decoder-ffn-embed-dim", 96]
    model = build(tiny_data_bin, ARCH, *TINY_MODEL, *dims, "--b2t-no-layer-norm")[0].eval()
    assert not [n for n, m in model.named_modules() if "LayerNorm" in type(m).__name__]
    assert not [n for n, _ in model.named_parameters() if "norm" in n]
    enc_alpha, enc_beta = 12**-0.15, 32**-0.2  # 0.6888 < 12/12 = 1; 0.5
    dec_alpha, dec_beta = 3 / 12, 48**-0.2  # 0.25 < 3^-0.15 = 0.848; 0.4611
    assert (enc_alpha, dec_alpha, dec_beta) == pytest.approx((0.68885, 0.25, 0.46105), abs=1e-5)
    for stack, alpha, beta in (("encoder", enc_alpha, enc_beta), ("decoder", dec_alpha, dec_beta)):
        layers = getattr(model, stack).layers
        assert [(lay.alpha, lay.beta) for lay in layers] == [(pytest.approx(alpha), pytest.approx(beta))] * len(layers)
    layer = model.encoder.layers[-1]
    x, pad = torch.randn(5, 3, 32), torch.zeros(3, 5, dtype=torch.bool)
    h = x + attend(layer.self_attn, x, x, key_padding_mask=pad)
    expected = enc_alpha * x + enc_beta * (h + ffn(layer, h))
    torch.testing.assert_close(layer(x, pad), expected)

    layer = model.decoder.layers[-1]
    x, enc = torch.randn(4, 2, 48), torch.randn(6, 2, 32)
    causal = torch.triu(torch.full((4, 4), float("-inf")), 1)
    h1 = x + attend(layer.self_attn, x, x, attn_mask=causal)
    h2 = h1 + attend(layer.encoder_attn, h1, enc)
    expected = dec_alpha * x + dec_beta * (h2 + ffn(layer, h2))
    out = layer(x, encoder_out=enc, encoder_padding_mask=None, self_attn_mask=causal)[0]
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("flags", [[], ["--b2t-no-layer-norm"]])
def test_incremental_decoding_equals_full_sequence(tiny_data_bin, flags):
    model, task, _ = build(tiny_data_bin, ARCH, *TINY_MODEL, *flags)
    model.eval()
    net = batch(task, n=6)["net_input"]
    prev = net["prev_output_tokens"]
    with torch.no_grad():
        enc = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        full = model.decoder(prev, encoder_out=enc)[0]
        state = {}
        steps = [
            model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)[0] for t in range(prev.size(1))
        ]
    real = prev.ne(task.target_dictionary.pad())
    torch.testing.assert_close(torch.cat(steps, dim=1)[real], full[real], atol=1e-5, rtol=1e-4)


def test_weight_rescale_option(tiny_data_bin):
    """--b2t-weight-rescale: each layer weight matrix x N^-0.5 of its stack; nothing else changes."""
    dims = [*TINY_MODEL, "--encoder-layers", "3", "--decoder-layers", "2"]
    plain = dict(build(tiny_data_bin, ARCH, *dims, seed=3)[0].named_parameters())
    scaled = dict(build(tiny_data_bin, ARCH, *dims, "--b2t-weight-rescale", seed=3)[0].named_parameters())
    for name, p in scaled.items():
        factor = 1.0
        if ".layers." in name and name.endswith("weight") and p.dim() == 2:
            factor = 3**-0.5 if name.startswith("encoder") else 2**-0.5
        torch.testing.assert_close(p, plain[name] * factor, msg=name)


def test_post_ln_only(tiny_data_bin):
    with pytest.raises(ValueError, match="Post-LN"):
        build(tiny_data_bin, ARCH, *TINY_MODEL, "--encoder-normalize-before")
