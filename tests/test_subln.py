"""Sub-LN / Magneto (Wang et al. 2022; microsoft/torchscale): each layer's forward pass
re-computed here from its own parameters with plain torch operations, and Magneto's
initialisation gains against torchscale's formulas, written out here (not imported).

Encoder and decoder have different depths (5L-3L), so that a gain computed for the wrong
stack, or from the wrong stack's depth, cannot agree by accident."""

import math

import pytest
import torch
from conftest import build, hand_set_layer_norms

N, M = 5, 3  # encoder, decoder layers

# torchscale 4d1e0e8, `if args.subln:` in architecture/encoder.py (Encoder.__init__) and
# architecture/decoder.py (Decoder.__init__): every parameter whose name holds fc1, fc2,
# out_proj or v_proj (weights and biases; in the decoder not the encoder attention's) is
# multiplied by the stack's init_scale after the default initialisation:
#   encoder of an encoder-decoder: sqrt(log(3 M) * log(2 N) / 3)  = 1.29862 at 5L-3L
#   decoder of an encoder-decoder: sqrt(log(3 M))                 = 1.48230 at 5L-3L
#   decoder without an encoder:    sqrt(log(2 M))
# (with N and M swapped the encoder's would be 1.27177; the two stacks' swapped, 1.48230 / 1.29862)
ENCODER_GAIN = math.sqrt(math.log(3 * M) * math.log(2 * N) / 3)
DECODER_GAIN = math.sqrt(math.log(3 * M))
EPS = 1e-5  # fairseq's LayerNorm


def lm_gain(layers):
    return math.sqrt(math.log(2 * layers))


def dims(d, ffn, heads=4, n=N, m=M):
    return [
        *("--encoder-embed-dim", d, "--decoder-embed-dim", d),
        *("--encoder-ffn-embed-dim", ffn, "--decoder-ffn-embed-dim", ffn),
        *("--encoder-layers", n, "--decoder-layers", m),
        *("--encoder-attention-heads", heads, "--decoder-attention-heads", heads),
    ]


# --- the forward pass, from the equations


def layer_norm(x, norm):
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last dimension."""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + EPS) * norm.weight + norm.bias


def linear(x, proj):
    return x @ proj.weight.T + proj.bias


def attention(query, memory, attn, heads, causal=None, pad=None, inner_norm=None):
    """Multi-head attention of query (T, B, C) over memory (S, B, C): softmax(q k^T / sqrt(d_h)) v
    per head, the heads concatenated, then (Sub-LN) ``inner_norm``, then out_proj."""
    (t, b, c), s = query.shape, memory.shape[0]
    dh = c // heads
    q = linear(query, attn.q_proj).view(t, b, heads, dh)
    k = linear(memory, attn.k_proj).view(s, b, heads, dh)
    v = linear(memory, attn.v_proj).view(s, b, heads, dh)
    scores = torch.einsum("tbhd,sbhd->bhts", q, k) / math.sqrt(dh)
    if causal is not None:
        scores = scores + causal
    if pad is not None:
        scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
    heads_out = torch.einsum("bhts,sbhd->tbhd", scores.softmax(-1), v).reshape(t, b, c)
    if inner_norm is not None:
        heads_out = layer_norm(heads_out, inner_norm)  # Sub-LN: LN over the concatenated heads
    return heads_out @ attn.out_proj.weight.T + attn.out_proj.bias


def sub_ln_ffn(x, layer):
    """fc2(LN(relu(fc1(x)))): Sub-LN's FFN, its LayerNorm FFN-dim wide."""
    h = torch.relu(linear(x, layer.fc1))
    return layer_norm(h, layer.fc2.norm) @ layer.fc2.weight.T + layer.fc2.bias


@pytest.fixture(scope="module")
def model(tiny_data_bin):
    """A 5L-3L Sub-LN model in float64 and eval mode, every LayerNorm (the inner ones too) with
    its own gamma and beta, every bias nonzero, so a wrong or missing term shows."""
    net = build(tiny_data_bin, "transformer_subln", *dims(32, 64))[0].double()
    hand_set_layer_norms(net)
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.endswith("bias") and "norm" not in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return net.eval()


def test_encoder_layer_equation(model):
    """x1 = x + W_o LN_a(Attn(LN_1(x))) + b_o; out = x1 + W_2 LN_f(relu(W_1 LN_2(x1) + b_1)) + b_2."""
    layer = model.encoder.layers[-1]
    x = torch.randn(6, 3, 32, dtype=torch.float64)
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[0, -2:] = pad[2, -1:] = True
    h = layer_norm(x, layer.self_attn_layer_norm)
    x1 = x + attention(h, h, layer.self_attn, 4, pad=pad, inner_norm=layer.self_attn.out_proj.norm)
    expected = x1 + sub_ln_ffn(layer_norm(x1, layer.final_layer_norm), layer)
    with torch.no_grad():
        torch.testing.assert_close(layer(x, pad), expected, rtol=1e-6, atol=1e-6)


def test_decoder_layer_equation(model):
    """Self-attention (causal) with its inner LayerNorm, encoder attention as Pre-LN's (torchscale
    gives it none), FFN with its inner LayerNorm; each sub-layer x + f(LN(x))."""
    layer = model.decoder.layers[-1]
    x, enc = torch.randn(5, 2, 32, dtype=torch.float64), torch.randn(7, 2, 32, dtype=torch.float64)
    enc_pad = torch.zeros(2, 7, dtype=torch.bool)
    enc_pad[1, -3:] = True
    causal = torch.triu(torch.full((5, 5), float("-inf"), dtype=torch.float64), 1)
    h = layer_norm(x, layer.self_attn_layer_norm)
    x1 = x + attention(h, h, layer.self_attn, 4, causal=causal, inner_norm=layer.self_attn.out_proj.norm)
    x2 = x1 + attention(layer_norm(x1, layer.encoder_attn_layer_norm), enc, layer.encoder_attn, 4, pad=enc_pad)
    expected = x2 + sub_ln_ffn(layer_norm(x2, layer.final_layer_norm), layer)
    with torch.no_grad():
        out = layer(x, encoder_out=enc, encoder_padding_mask=enc_pad, self_attn_mask=causal)[0]
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)


def test_the_stacks_end_with_pre_lns_final_layer_norm(model):
    assert model.encoder.layer_norm is not None and model.decoder.layer_norm is not None
    assert all(layer.normalize_before for layer in [*model.encoder.layers, *model.decoder.layers])


def test_incremental_decoding_gives_the_full_pass(tiny_data_bin):
    """Step by step (fairseq's incremental state, the attention's other code path) the decoder
    gives what one pass over the whole prefix gives."""
    net = hand_set_layer_norms(build(tiny_data_bin, "transformer_subln", *dims(32, 64))[0]).eval()
    src = torch.randint(4, 30, (2, 6))
    prev = torch.randint(4, 30, (2, 5))
    with torch.no_grad():
        enc = net.encoder(src, src_lengths=torch.tensor([6, 6]))
        full = net.decoder(prev, encoder_out=enc)[0]
        state = {}
        steps = [net.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)[0] for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


# --- Magneto's initialisation


def sublayer_projections(layer):
    """{name: module} of the projections torchscale scales (self-attention v/out, fc1, fc2)."""
    return {"v_proj": layer.self_attn.v_proj, "out_proj": layer.self_attn.out_proj, "fc1": layer.fc1, "fc2": layer.fc2}


@pytest.mark.parametrize("init_style", ["paper", "fairseq"])
def test_gains_multiply_the_pre_ln_initialisation(tiny_data_bin, init_style):
    """Same seed: Sub-LN's parameters are Pre-LN's (nothing extra drawn), the self-attention's
    v/out and fc1/fc2 weights and biases times the stack's gain, everything else (q/k, the
    encoder attention, embeddings, LayerNorms) as it was; its only extra parameters are the two
    inner LayerNorms per layer (none in the encoder attention), starting at gamma 1, beta 0.
    ``--init-style fairseq`` leaves fc1/fc2 and v biases nonzero, so biases are checked too."""
    flags = (*dims(32, 64), "--init-style", init_style)
    sub = dict(build(tiny_data_bin, "transformer_subln", *flags)[0].named_parameters())
    pre = dict(build(tiny_data_bin, "transformer_preln", *flags)[0].named_parameters())
    extra = {f"{stack}.layers.{i}.{proj}.norm.{p}" for stack, n in (("encoder", N), ("decoder", M)) for i in range(n)
             for proj in ("self_attn.out_proj", "fc2") for p in ("weight", "bias")}  # fmt: skip
    assert set(sub) - set(pre) == extra and set(pre) <= set(sub)
    for name in extra:
        assert torch.equal(
            sub[name], torch.ones_like(sub[name]) if name.endswith("weight") else torch.zeros_like(sub[name])
        )
    scaled = ("self_attn.v_proj.", "self_attn.out_proj.", "fc1.", "fc2.")
    nonzero_biases = 0
    for name, value in pre.items():
        gain = 1.0
        if ".layers." in name and any(f".{s}" in name for s in scaled):
            gain = ENCODER_GAIN if name.startswith("encoder.") else DECODER_GAIN
            nonzero_biases += name.endswith("bias") and bool(value.abs().sum() > 0)
        torch.testing.assert_close(sub[name], value * gain, rtol=1e-6, atol=0, msg=name)
    assert (nonzero_biases > 0) is (init_style == "fairseq")


def test_measured_weight_std_is_the_formulas(tiny_data_bin):
    """Pooled over each stack's layers, the std of each projection's weight is its
    ``--init-style paper`` std (fairseq's Xavier-uniform: q/k/v gain 1/sqrt(2), out_proj and
    fc1/fc2 gain 1) times the stack's gain for v/out/fc1/fc2, times 1 for q/k and for the
    decoder's encoder attention."""
    d, ffn = 128, 256
    net = build(tiny_data_bin, "transformer_subln", *dims(d, ffn), "--init-style", "paper")[0]

    def xavier_std(fan_in, fan_out, gain=1.0):
        return gain * math.sqrt(2.0 / (fan_in + fan_out))

    base = {
        "q_proj": xavier_std(d, d, 2**-0.5),
        "k_proj": xavier_std(d, d, 2**-0.5),
        "v_proj": xavier_std(d, d, 2**-0.5),
        "out_proj": xavier_std(d, d),
        "fc1": xavier_std(d, ffn),
        "fc2": xavier_std(ffn, d),
    }
    for stack, gain in (("encoder", ENCODER_GAIN), ("decoder", DECODER_GAIN)):
        layers = getattr(net, stack).layers
        for kind, std in base.items():
            owner = (lambda lay: lay) if kind.startswith("fc") else (lambda lay: lay.self_attn)
            w = torch.cat([getattr(owner(lay), kind).weight.detach().flatten() for lay in layers])
            expected = std * (gain if kind in ("v_proj", "out_proj", "fc1", "fc2") else 1.0)
            assert w.std().item() == pytest.approx(expected, rel=0.02), (stack, kind)
    for kind in ("q_proj", "v_proj", "out_proj"):  # the decoder's encoder attention: unscaled
        w = torch.cat([getattr(lay.encoder_attn, kind).weight.detach().flatten() for lay in net.decoder.layers])
        assert w.std().item() == pytest.approx(base[kind], rel=0.02), kind


@pytest.mark.parametrize("layers", [2, 4])
def test_decoder_only_gain(lm_data_bin, layers):
    """A decoder-only stack of M layers: sqrt(log(2M)) on v/out/fc1/fc2, weights and biases."""
    flags = ["--task", "language_modeling", "--tokens-per-sample", "32", "--decoder-layers", layers]
    flags += ["--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2"]
    flags += ["--init-style", "fairseq"]
    sub = build(lm_data_bin, "transformer_lm_subln", *flags)[0]
    pre = build(lm_data_bin, "transformer_lm_preln", *flags)[0]
    assert sub.decoder.layer_norm is not None and sub.decoder.layers[0].encoder_attn is None
    for lay_sub, lay_pre in zip(sub.decoder.layers, pre.decoder.layers):
        for kind, proj in sublayer_projections(lay_sub).items():
            ref = sublayer_projections(lay_pre)[kind]
            torch.testing.assert_close(proj.weight, ref.weight * lm_gain(layers), msg=kind)
            torch.testing.assert_close(proj.bias, ref.bias * lm_gain(layers), msg=kind)
        torch.testing.assert_close(lay_sub.self_attn.q_proj.weight, lay_pre.self_attn.q_proj.weight)


def test_subln_init_none_is_pre_lns_initialisation(tiny_data_bin):
    sub = dict(build(tiny_data_bin, "transformer_subln", *dims(32, 64), "--subln-init", "none")[0].named_parameters())
    for name, value in build(tiny_data_bin, "transformer_preln", *dims(32, 64))[0].named_parameters():
        assert torch.equal(sub[name], value), name


# --- options


def test_rmsnorm_replaces_the_inner_norms_too(tiny_data_bin):
    net = build(tiny_data_bin, "transformer_subln", *dims(32, 64), "--norm-type", "rmsnorm")[0]
    for layer in [*net.encoder.layers, *net.decoder.layers]:
        for norm in (layer.fc2.norm, layer.self_attn.out_proj.norm, layer.final_layer_norm):
            assert isinstance(norm, torch.nn.RMSNorm)
    assert type(net.decoder.layers[0].encoder_attn.out_proj) is torch.nn.Linear


def test_normformers_scale_fc_is_refused(lm_data_bin):
    """fairseq's --scale-fc (NormFormer) would add a second LayerNorm before fc2."""
    flags = ["--task", "language_modeling", "--decoder-layers", "2", "--scale-fc"]
    with pytest.raises(ValueError, match="drop --scale-fc"):
        build(lm_data_bin, "transformer_lm_subln", *flags)
