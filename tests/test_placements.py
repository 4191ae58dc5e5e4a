"""The newer placements, each layer's forward pass re-computed here from its own parameters:
Peri-LN, Mix-LN, LayerNorm Scaling, ReZero, DyT, and ``--norm-type rmsnorm``. Every
normalisation layer gets its own parameters first (``hand_set_layer_norms`` and below), so
using the wrong one, or none, shows."""

import math

import pytest
import torch
from conftest import TINY_MODEL, build, ffn, hand_set_layer_norms

from layernorm_methods.norms import DynamicTanh

DEEP = ["--encoder-layers", "8", "--decoder-layers", "4"]


def built(data_bin, arch, *flags):
    model, _, _ = build(data_bin, arch, *TINY_MODEL, *flags)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for module in model.modules():  # RMSNorm and DyT too: gamma around 1, beta around 0
            if isinstance(module, torch.nn.RMSNorm | DynamicTanh):
                module.weight.copy_(1 + 0.5 * torch.randn(module.weight.shape, generator=gen))
            if isinstance(module, DynamicTanh):
                module.bias.copy_(0.5 * torch.randn(module.bias.shape, generator=gen))
    return hand_set_layer_norms(model).eval()


def attn(layer, h, pad):
    return layer.self_attn(h, h, h, key_padding_mask=pad, need_weights=False)[0]


@pytest.fixture
def inputs():
    pad = torch.zeros(3, 5, dtype=torch.bool)
    pad[0, -2:] = True
    return torch.randn(5, 3, 32), pad  # (S, B, C), (B, S)


def test_peri_ln_normalises_each_branch_in_and_out(tiny_data_bin, inputs):
    """x1 = x + LN_o1(Attn(LN_i1(x))); out = x1 + LN_o2(FFN(LN_i2(x1))); Pre-LN's final LayerNorm."""
    model = built(tiny_data_bin, "transformer_periln")
    layer, (x, pad) = model.encoder.layers[0], inputs
    x1 = x + layer.self_attn_out_norm(attn(layer, layer.self_attn_layer_norm(x), pad))
    expected = x1 + layer.ffn_out_norm(ffn(layer, layer.final_layer_norm(x1)))
    torch.testing.assert_close(layer(x, pad), expected)
    assert model.encoder.layer_norm is not None and model.decoder.layer_norm is not None
    assert isinstance(model.decoder.layers[0].encoder_attn_out_norm, torch.nn.LayerNorm)
    assert isinstance(layer.encoder_attn_out_norm, torch.nn.Identity)  # no parameters in the encoder


@pytest.mark.parametrize(("flags", "post"), [((), (2, 1)), (("--mixln-post-layers", "3"), (3, 3))])
def test_mix_ln_is_post_ln_below_and_pre_ln_above(tiny_data_bin, inputs, flags, post):
    """floor(0.25 L) Post-LN layers by default (8 -> 2 encoder, 4 -> 1 decoder layers), then Pre-LN."""
    model = built(tiny_data_bin, "transformer_mixln", *DEEP, *flags)
    for stack, k in zip((model.encoder, model.decoder), post):
        assert [layer.normalize_before for layer in stack.layers] == [i >= k for i in range(len(stack.layers))]
    x, pad = inputs
    below, above = model.encoder.layers[0], model.encoder.layers[-1]
    h = below.self_attn_layer_norm(x + attn(below, x, pad))
    torch.testing.assert_close(below(x, pad), below.final_layer_norm(h + ffn(below, h)))
    x1 = x + attn(above, above.self_attn_layer_norm(x), pad)
    torch.testing.assert_close(above(x, pad), x1 + ffn(above, above.final_layer_norm(x1)))
    assert model.encoder.layer_norm is not None


def test_mix_ln_refuses_more_post_layers_than_the_stack_has(tiny_data_bin):
    with pytest.raises(ValueError, match="between 0 and 2"):
        build(tiny_data_bin, "transformer_mixln", *TINY_MODEL, "--mixln-post-layers", "3")


@pytest.mark.parametrize("index", [0, 3])
def test_layer_norm_scaling_divides_layer_ls_norms_by_sqrt_l(tiny_data_bin, inputs, index):
    """Layer l = index + 1: x1 = x + Attn(LN1(x) / sqrt(l)); out = x1 + FFN(LN2(x1) / sqrt(l))."""
    model = built(tiny_data_bin, "transformer_lns", *DEEP)
    layer, (x, pad), scale = model.encoder.layers[index], inputs, 1 / math.sqrt(index + 1)
    x1 = x + attn(layer, layer.self_attn_layer_norm.norm(x) * scale, pad)
    expected = x1 + ffn(layer, layer.final_layer_norm.norm(x1) * scale)
    torch.testing.assert_close(layer(x, pad), expected)
    assert type(model.encoder.layer_norm) is torch.nn.LayerNorm  # the final norm is not scaled
    assert model.decoder.layers[3].encoder_attn_layer_norm.scale == pytest.approx(0.5)


def test_rezero_starts_as_the_identity_and_scales_each_branch(tiny_data_bin, inputs):
    """alpha = 0 at first: every layer is the identity; then x1 = x + a Attn(x), out = x1 + a FFN(x1)."""
    model = built(tiny_data_bin, "transformer_rezero")
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    assert model.encoder.layer_norm is None and model.decoder.layer_norm is None
    layer, (x, pad) = model.encoder.layers[0], inputs
    torch.testing.assert_close(layer(x, pad), x)
    with torch.no_grad():
        layer.rezero_alpha.fill_(0.7)
    x1 = x + 0.7 * attn(layer, x, pad)
    torch.testing.assert_close(layer(x, pad), x1 + 0.7 * ffn(layer, x1))
    assert sum(name.endswith("rezero_alpha") for name, _ in model.named_parameters()) == 4  # one per layer


def test_dyt_replaces_every_layer_norm(tiny_data_bin, inputs):
    """gamma * tanh(alpha x) + beta in place of every LayerNorm, the final ones too; Pre-LN placement."""
    model = built(tiny_data_bin, "transformer_dyt", "--dyt-alpha-init", "0.3")
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    assert isinstance(model.encoder.layer_norm, DynamicTanh) and isinstance(model.decoder.layer_norm, DynamicTanh)
    layer, (x, pad) = model.encoder.layers[0], inputs
    norm1, norm2 = layer.self_attn_layer_norm, layer.final_layer_norm
    assert norm1.alpha.item() == pytest.approx(0.3)

    def dyt(norm, t):
        return norm.weight * torch.tanh(norm.alpha * t) + norm.bias

    x1 = x + attn(layer, dyt(norm1, x), pad)
    torch.testing.assert_close(layer(x, pad), x1 + ffn(layer, dyt(norm2, x1)))
    assert built(tiny_data_bin, "transformer_dyt").encoder.layer_norm.alpha.item() == 0.5  # the paper's default


@pytest.mark.parametrize("arch", ["transformer_preln", "transformer_periln", "transformer_b2t"])
def test_rms_norm_in_place_of_every_layer_norm(tiny_data_bin, inputs, arch):
    """``--norm-type rmsnorm``: x / sqrt(mean(x^2) + eps) * g wherever the method normalises."""
    model = built(tiny_data_bin, arch, "--norm-type", "rmsnorm")
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    assert any(isinstance(m, torch.nn.RMSNorm) for m in model.modules())
    norm, x = model.encoder.layers[0].self_attn_layer_norm, inputs[0]
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight
    torch.testing.assert_close(norm(x), expected)
    if arch == "transformer_preln":
        layer, pad = model.encoder.layers[0], inputs[1]
        x1 = x + attn(layer, layer.self_attn_layer_norm(x), pad)
        torch.testing.assert_close(layer(x, pad), x1 + ffn(layer, layer.final_layer_norm(x1)))


@pytest.mark.parametrize("scale", [1.0, 0.05])
def test_residual_adds_the_normalised_sum_of_every_branch_at_the_top(tiny_data_bin, scale):
    """ResiDual: each layer Post-LN, x_i = LN(x_{i-1} + f_i); d = s x_0 + s * sum f_i over every
    sub-layer of the stack; the encoder's output alpha x_L + LN(d), re-computed layer by layer."""
    model = built(tiny_data_bin, "transformer_residual", "--residual-dual-scale", scale, "--residual-alpha", 0.8)
    encoder = model.encoder
    tokens = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 11, 2, 1]])
    with torch.no_grad():
        x, _ = encoder.forward_embedding(tokens)
        x = x.transpose(0, 1)
        pad = tokens.eq(1)
        dual = scale * x
        for layer in encoder.layers:
            f = attn(layer, x, pad)
            dual, x = dual + scale * f, layer.self_attn_layer_norm(x + f)
            f = ffn(layer, x)
            dual, x = dual + scale * f, layer.final_layer_norm(x + f)
        expected = 0.8 * x + encoder.layer_norm.norm(dual)
        out = encoder(tokens, src_lengths=torch.tensor([5, 4]))["encoder_out"][0]
    torch.testing.assert_close(out, expected)
    assert encoder.layer_norm.norm.eps == 1e-7 and encoder.layer_norm.stream.total is None  # nothing kept


def test_residual_with_every_layer_dropped_is_alpha_x0_plus_ln_of_s_x0(tiny_data_bin):
    """LayerDrop may skip every layer of a stack (always, at p = 1): the output is then
    alpha x_0 + LN(s x_0), as in the authors' code; and a pass cut short leaves no sum behind."""
    flags = ("--residual-dual-scale", 0.05, "--residual-alpha", 0.8, "--encoder-layerdrop", 1.0, "--dropout", 0)
    encoder = built(tiny_data_bin, "transformer_residual", *flags).encoder.train()  # LayerDrop drops in training
    tokens = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 11, 2, 1]])
    with torch.no_grad():
        x0 = encoder.forward_embedding(tokens)[0].transpose(0, 1)
        expected = 0.8 * x0 + encoder.layer_norm.norm(0.05 * x0)
        encoder.layer_norm.stream.total = torch.full_like(x0, 7.0)  # what an interrupted pass would leave
        out = encoder(tokens, src_lengths=torch.tensor([5, 4]))["encoder_out"][0]
    torch.testing.assert_close(out, expected)


def assert_decodes_incrementally_as_in_one_pass(model):
    """Step-by-step decoding (fairseq's incremental state) gives the one-pass outputs."""
    src, prev = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[2, 8, 9, 10]])
    with torch.no_grad():
        encoder_out = model.encoder(src, src_lengths=torch.tensor([4]))
        whole = model.decoder(prev, encoder_out=encoder_out)[0]
        state, steps = {}, []
        for t in range(prev.shape[1]):
            steps.append(model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)[0])
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ["transformer_residual", "transformer_dlcl"])
def test_state_between_layers_decodes_incrementally_as_in_one_pass(tiny_data_bin, arch):
    """ResiDual's dual stream and DLCL's history start again at every call."""
    assert_decodes_incrementally_as_in_one_pass(built(tiny_data_bin, arch))


def test_dlcl_feeds_each_layer_a_learned_sum_of_every_earlier_output(tiny_data_bin):
    """x_{l+1} = sum_{k<=l} W[l, k] LN_k(y_k) (LN_0 the identity), each layer Pre-LN on it, the
    output LN_final(sum_{k<=L} W[L, k] LN_k(y_k)); W starts as the average and is learnable."""
    model = built(tiny_data_bin, "transformer_dlcl", *DEEP)
    encoder = model.encoder
    history = encoder.dlcl
    torch.testing.assert_close(history.weights[2], torch.tensor([1 / 3] * 3 + [0.0] * 6))  # row 2 of 9
    with torch.no_grad():
        history.weights.add_(0.3 * torch.randn(history.weights.shape).tril())  # away from the average
    tokens = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 11, 2, 1]])
    with torch.no_grad():
        y, _ = encoder.forward_embedding(tokens)
        pad = tokens.eq(1)
        kept = [y.transpose(0, 1)]  # LN_0(y_0) = y_0
        for index, layer in enumerate(encoder.layers):
            x = sum(history.weights[index, k] * kept[k] for k in range(index + 1))
            x1 = x + attn(layer, layer.self_attn_layer_norm(x), pad)
            out = x1 + ffn(layer, layer.final_layer_norm(x1))
            kept.append(history.layer_norms[index](out))
        expected = encoder.layer_norm.final_norm(sum(history.weights[8, k] * kept[k] for k in range(9)))
        got = encoder(tokens, src_lengths=torch.tensor([5, 4]))["encoder_out"][0]
    torch.testing.assert_close(got, expected)
    assert history.weights.requires_grad and not hasattr(history, "outputs")  # nothing kept between passes


def test_dlcl_postnorm_feeds_each_post_ln_layer_the_normalised_learned_sum(tiny_data_bin):
    """The authors' post-norm variant: x_{l+1} = LN_l(sum_{k<=l} W[l, k] y_k) (LN_0 the identity),
    each layer Post-LN on it, the output LN_L(sum_{k<=L} W[L, k] y_k) and no final LayerNorm."""
    model = built(tiny_data_bin, "transformer_dlcl_postnorm", *DEEP)
    encoder = model.encoder
    history = encoder.dlcl
    assert history.post_norm and encoder.layer_norm.final_norm is None
    assert not model.cfg.encoder.normalize_before and not model.cfg.decoder.normalize_before
    with torch.no_grad():
        history.weights.add_(0.3 * torch.randn(history.weights.shape).tril())
    tokens = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 11, 2, 1]])
    with torch.no_grad():
        y, _ = encoder.forward_embedding(tokens)
        pad = tokens.eq(1)
        kept = [y.transpose(0, 1)]  # y_0, as it is
        for index, layer in enumerate(encoder.layers):
            total = sum(history.weights[index, k] * kept[k] for k in range(index + 1))
            x = total if index == 0 else history.layer_norms[index - 1](total)
            x1 = layer.self_attn_layer_norm(x + attn(layer, x, pad))
            kept.append(layer.final_layer_norm(x1 + ffn(layer, x1)))
        expected = history.layer_norms[7](sum(history.weights[8, k] * kept[k] for k in range(9)))
        got = encoder(tokens, src_lengths=torch.tensor([5, 4]))["encoder_out"][0]
    torch.testing.assert_close(got, expected)
