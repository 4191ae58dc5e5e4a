"""ReZero, Peri-LN, LayerNorm Scaling, Mix-LN and DyT in the core (``layernorm_methods``):
each core model computes what its fairseq arch computes on the fairseq model's weights
(``helpers/core_equality.py``: encoder-decoder and decoder-only, eval and train mode, two depths),
with the options that change what is computed; and each method's rule, recomputed here by hand
on a core model, from its sub-modules' weights."""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers.core_equality import assert_same

from layernorm_methods import build_language_model, build_model
from layernorm_methods.norms import DynamicTanh

NEW_METHODS = ("rezero", "periln", "lns", "mixln", "dyt")
SIZES = dict(embed_dim=16, ffn_embed_dim=32, attention_heads=2, dropout=0.0)
VOCAB = 20
TOKENS = torch.tensor([[5, 6, 7, 8, 9, 2], [10, 11, 12, 13, 14, 2]])  # (B, T), no padding


def flag_id(value):
    """A test id: the method, or its flags ("mixln-post-layers-1"; "defaults" for none)."""
    if not isinstance(value, tuple):
        return value
    return "-".join(str(v).lstrip("-") for v in value) or "defaults"


@pytest.mark.parametrize(
    "method, flags",
    [
        *((method, ()) for method in NEW_METHODS),
        ("mixln", ("--mixln-post-layers", "1")),
        ("dyt", ("--dyt-alpha-init", "0.8")),
        ("lns", ("--norm-type", "rmsnorm")),
        ("periln", ("--norm-type", "rmsnorm")),
    ],
    ids=flag_id,
)
def test_translation_models_match(tiny_data_bin, method, flags):
    assert_same(tiny_data_bin, method, "translation", *flags)


@pytest.mark.parametrize(
    "method, flags",
    [
        *((method, ()) for method in NEW_METHODS),
        ("mixln", ("--mixln-post-layers", "1")),
        ("dyt", ("--dyt-alpha-init", "0.8")),
        ("periln", ("--norm-type", "rmsnorm")),
    ],
    ids=flag_id,
)
def test_language_models_match(lm_data_bin, method, flags):
    assert_same(lm_data_bin, method, "lm", *flags)


# --- each method's rule, by hand on a core model (eval mode, dropout 0, no padding)


def perturbed(model, seed=0):
    """``model`` in eval mode with every weight off its initial value (unit gains, zero biases
    and zero gates would hide a norm or a gate used in the wrong place)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen))
    return model.eval()


def ln(norm, x):
    """LayerNorm by its formula, with ``norm``'s gain and bias."""
    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def attn(layer, x):
    """An encoder layer's self-attention branch."""
    return layer.self_attn(x, x, x)


def ffn(layer, x):
    """A layer's feed-forward branch, ReLU."""
    return layer.fc2(F.relu(layer.fc1(x)))


def embedded(stack):
    """The stack's input for ``TOKENS``, (T, B, C)."""
    return stack.embed(TOKENS)


def test_rezero_layers_are_the_identity_at_init_and_x_plus_alpha_f_after():
    model = build_model("rezero", VOCAB, encoder_layers=3, decoder_layers=2, **SIZES).eval()
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())  # no norm anywhere
    x = torch.randn(6, 2, 16)
    enc = torch.randn(5, 2, 16)
    with torch.no_grad():
        for layer in model.encoder.layers:
            assert layer.rezero_alpha.item() == 0
            torch.testing.assert_close(layer(x, encoder_padding_mask=None), x, rtol=0, atol=0)
        for layer in model.decoder.layers:
            torch.testing.assert_close(layer(x, enc, None), x, rtol=0, atol=0)
        layer = perturbed(model).encoder.layers[1]
        alpha = layer.rezero_alpha
        x1 = x + alpha * attn(layer, x)  # Bachlechner et al. 2020: x + alpha F(x)
        torch.testing.assert_close(layer(x, encoder_padding_mask=None), x1 + alpha * ffn(layer, x1))


def test_periln_normalises_each_sublayers_input_and_output():
    model = perturbed(build_model("periln", VOCAB, encoder_layers=2, decoder_layers=2, **SIZES))
    x, enc = torch.randn(6, 2, 16), torch.randn(5, 2, 16)
    with torch.no_grad():
        layer = model.encoder.layers[1]
        x1 = x + ln(layer.self_attn_out_norm, attn(layer, ln(layer.self_attn_layer_norm, x)))
        out = x1 + ln(layer.ffn_out_norm, ffn(layer, ln(layer.final_layer_norm, x1)))
        torch.testing.assert_close(layer(x, encoder_padding_mask=None), out)
        layer = model.decoder.layers[0]
        h = ln(layer.self_attn_layer_norm, x)
        x1 = x + ln(layer.self_attn_out_norm, layer.self_attn(h, h, h, causal=True))
        h = ln(layer.encoder_attn_layer_norm, x1)
        x2 = x1 + ln(layer.encoder_attn_out_norm, layer.encoder_attn(h, enc, enc))
        out = x2 + ln(layer.ffn_out_norm, ffn(layer, ln(layer.final_layer_norm, x2)))
        torch.testing.assert_close(layer(x, enc, None), out)
    assert isinstance(model.encoder.layer_norm, torch.nn.LayerNorm)  # Pre-LN's final norm


def test_lns_scales_layer_ls_norms_by_one_over_sqrt_l():
    model = perturbed(build_model("lns", VOCAB, encoder_layers=4, decoder_layers=1, **SIZES))
    encoder = model.encoder
    with torch.no_grad():
        x = embedded(encoder)
        for number, layer in enumerate(encoder.layers, start=1):
            scale = 1 / math.sqrt(number)  # Sun et al. 2025: LN(x) / sqrt(l)
            x = x + attn(layer, ln(layer.self_attn_layer_norm.norm, x) * scale)
            x = x + ffn(layer, ln(layer.final_layer_norm.norm, x) * scale)
        out = ln(encoder.layer_norm, x)  # the final norm is not scaled
        torch.testing.assert_close(encoder(TOKENS)[0], out)


def test_mixln_makes_the_first_quarter_of_each_stack_post_ln():
    model = perturbed(build_model("mixln", VOCAB, encoder_layers=8, decoder_layers=5, **SIZES))
    for stack in (model.encoder, model.decoder):
        k = len(stack.layers) // 4  # Li et al. 2024: floor(0.25 L) Post-LN layers
        assert [layer.normalize_before for layer in stack.layers] == [i >= k for i in range(len(stack.layers))]
    lm = build_language_model("mixln", VOCAB, layers=12, **SIZES)
    assert [layer.normalize_before for layer in lm.decoder.layers] == [False] * 3 + [True] * 9
    encoder = model.encoder
    with torch.no_grad():
        x = embedded(encoder)
        for index, layer in enumerate(encoder.layers):
            if index < 2:  # Post-LN: LN(x + f(x))
                x = ln(layer.self_attn_layer_norm, x + attn(layer, x))
                x = ln(layer.final_layer_norm, x + ffn(layer, x))
            else:  # Pre-LN: x + f(LN(x))
                x = x + attn(layer, ln(layer.self_attn_layer_norm, x))
                x = x + ffn(layer, ln(layer.final_layer_norm, x))
        torch.testing.assert_close(encoder(TOKENS)[0], ln(encoder.layer_norm, x))


def test_dyt_replaces_every_norm_by_gamma_tanh_alpha_x_plus_beta():
    model = build_model("dyt", VOCAB, encoder_layers=2, decoder_layers=2, **SIZES)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    dyts = [m for m in model.modules() if isinstance(m, DynamicTanh)]
    assert len(dyts) == 2 * 2 + 2 * 3 + 2  # two per encoder layer, three per decoder layer, two final
    assert all(m.alpha.item() == 0.5 for m in dyts)  # Zhu et al. 2025's default alpha_0
    perturbed(model)
    encoder = model.encoder

    def dyt(norm, x):  # Zhu et al. 2025: gamma * tanh(alpha x) + beta
        return norm.weight * torch.tanh(norm.alpha * x) + norm.bias

    with torch.no_grad():
        x = embedded(encoder)
        for layer in encoder.layers:
            x = x + attn(layer, dyt(layer.self_attn_layer_norm, x))
            x = x + ffn(layer, dyt(layer.final_layer_norm, x))
        torch.testing.assert_close(encoder(TOKENS)[0], dyt(encoder.layer_norm, x))
