"""T-Fixup, DeepNet and Sub-LN / Magneto in the core (``layernorm_methods``): each core model
computes what its fairseq arch computes on the fairseq model's weights (translation and
language model, with each option that changes what is built), and the core's own
initialisation follows the method's rule, its factors written out here from the papers (not
imported), at depths where encoder and decoder factors differ."""

import math

import pytest
import torch
from helpers.core_equality import assert_same

import layernorm_methods

D, FFN, HEADS = 256, 512, 4  # wide enough that a pooled std is within ~1% of its expectation
VOCAB = 1000

# --- equality with the fairseq archs


@pytest.mark.parametrize(
    "method, flags",
    [
        ("tfixup", ()),
        ("tfixup", ("--tfixup-qkv-bias", "zero")),
        ("deepnet", ()),
        ("deepnet", ("--deepnet-init", "torchscale")),
        ("subln", ()),
        ("subln", ("--subln-init", "none")),
    ],
)
def test_translation_models_match(tiny_data_bin, method, flags):
    assert_same(tiny_data_bin, method, "translation", *flags)


@pytest.mark.parametrize("method", ["tfixup", "deepnet", "subln"])
def test_language_models_match(lm_data_bin, method):
    assert_same(lm_data_bin, method, "lm")


def test_tfixup_shared_embeddings_match(joined_data_bin):
    """One embedding matrix for both stacks (scaled once, by the encoder's factor)."""
    assert_same(joined_data_bin, "tfixup", "translation", "--share-all-embeddings")


# --- the core's own initialisation, against the papers' factors


def xavier_std(fan_in, fan_out, gain=1.0):
    """The std of Xavier-uniform and Xavier-normal alike: gain sqrt(2 / (fan_in + fan_out))."""
    return gain * math.sqrt(2.0 / (fan_in + fan_out))


def pooled_std(tensors):
    return torch.cat([t.detach().flatten() for t in tensors]).std().item()


def attns(layers, with_cross=True):
    """Every layer's self-attention, and its encoder attention if any (and ``with_cross``)."""
    found = [layer.self_attn for layer in layers]
    if with_cross:
        found += [layer.encoder_attn for layer in layers if getattr(layer, "encoder_attn", None) is not None]
    return found


def core_model(method, encoder_layers, decoder_layers, seed=0, **options):
    torch.manual_seed(seed)
    return layernorm_methods.build_model(
        method,
        VOCAB,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        embed_dim=D,
        ffn_embed_dim=FFN,
        attention_heads=HEADS,
        **options,
    )


def assert_matrix_stds(layers, gains, with_cross=True):
    """Pooled std of each of ``gains`` (q/k/v/out_proj, fc1, fc2: expected Xavier gain) over ``layers``."""
    for kind, gain in gains.items():
        if kind in ("fc1", "fc2"):
            weights, fans = [getattr(layer, kind).weight for layer in layers], (D, FFN)
        else:
            weights, fans = [getattr(a, kind).weight for a in attns(layers, with_cross)], (D, D)
        expected = xavier_std(*fans, gain)
        assert pooled_std(weights) == pytest.approx(expected, rel=0.03), (kind, gain)


# T-Fixup (Huang et al. 2020, Sec. 3.3): encoder v/out/fc1/fc2 x 0.67 N_e^-1/4 and its embedding
# x (9 N_e)^-1/4; decoder v/out/fc1/fc2 and embedding x (9 N_d)^-1/4; decoder-only (ours) (6 M)^-1/4.
# At 2L-6L: 0.5634, 0.4855, 0.3689; the encoder's rule at the decoder's depth would give 0.4281.
T_N_E, T_N_D = 2, 6


def test_tfixup_core_initialisation():
    model = core_model("tfixup", T_N_E, T_N_D)
    assert not [name for name, m in model.named_modules() if isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm))]
    assert not [name for name, _ in model.named_parameters() if "norm" in name]
    for stack, scale, embed_scale in (
        (model.encoder, 0.67 * T_N_E**-0.25, (9 * T_N_E) ** -0.25),
        (model.decoder, (9 * T_N_D) ** -0.25, (9 * T_N_D) ** -0.25),
    ):
        assert stack.layer_norm is None and stack.layernorm_embedding is None
        # v re-drawn at Xavier gain 1 (fairseq draws 1/sqrt(2)), out and fc1/fc2 Xavier gain 1; q/k untouched
        gains = dict(v_proj=scale, out_proj=scale, fc1=scale, fc2=scale, q_proj=2**-0.5, k_proj=2**-0.5)
        assert_matrix_stds(stack.layers, gains)
        for layer in stack.layers:
            assert torch.all(layer.fc1.bias == 0) and torch.all(layer.fc2.bias == 0)
        q_biases = [a.q_proj.bias for a in attns(stack.layers)]  # fork: nn.Linear's U(+-1/sqrt(fan_in))
        assert pooled_std(q_biases) == pytest.approx(D**-0.5 / math.sqrt(3), rel=0.1)
        weight, pad = stack.embed_tokens.weight.detach(), stack.embed_tokens.padding_idx
        assert torch.all(weight[pad] == 0)
        rows = torch.cat([weight[:pad], weight[pad + 1 :]])
        assert rows.std().item() == pytest.approx(D**-0.5 * embed_scale, rel=0.03)
    zero = core_model("tfixup", T_N_E, T_N_D, tfixup_qkv_bias="zero")
    for a in attns(list(zero.encoder.layers) + list(zero.decoder.layers)):
        assert all(torch.all(p.bias == 0) for p in (a.q_proj, a.k_proj, a.v_proj))
    lm = layernorm_methods.build_language_model("tfixup", VOCAB, layers=T_N_D, embed_dim=D, ffn_embed_dim=FFN)
    assert_matrix_stds(lm.decoder.layers, dict(v_proj=(6 * T_N_D) ** -0.25, fc2=(6 * T_N_D) ** -0.25))


# DeepNet (Wang et al. 2022, Table 1), N encoder and M decoder layers: encoder alpha 0.81 (N^4 M)^(1/16),
# beta 0.87 (N^4 M)^(-1/16); decoder alpha (3M)^(1/4), beta (12M)^(-1/4); decoder-only alpha (2M)^(1/4),
# beta (8M)^(-1/4). At 4L-2L the encoder's beta is 0.5887 (0.6709 with N and M swapped), the decoder's 0.4518.
DN_N, DN_M = 4, 2
DN_ENCODER = 0.81 * (DN_N**4 * DN_M) ** (1 / 16), 0.87 * (DN_N**4 * DN_M) ** (-1 / 16)
DN_DECODER = (3 * DN_M) ** 0.25, (12 * DN_M) ** -0.25


def test_deepnet_core_initialisation():
    """The paper's pseudo-code (Fig. 2): xavier_normal_ gain beta on v/out/fc1/fc2, gain 1 on q/k."""
    model = core_model("deepnet", DN_N, DN_M)
    for stack, (alpha, beta) in ((model.encoder, DN_ENCODER), (model.decoder, DN_DECODER)):
        assert all(layer.alpha == pytest.approx(alpha) for layer in stack.layers)
        gains = dict(v_proj=beta, out_proj=beta, fc1=beta, fc2=beta, q_proj=1.0, k_proj=1.0)
        assert_matrix_stds(stack.layers, gains)
    lm = layernorm_methods.build_language_model("deepnet", VOCAB, layers=DN_M, embed_dim=D, ffn_embed_dim=FFN)
    assert all(layer.alpha == pytest.approx((2 * DN_M) ** 0.25) for layer in lm.decoder.layers)
    assert_matrix_stds(lm.decoder.layers, dict(v_proj=(8 * DN_M) ** -0.25, fc1=(8 * DN_M) ** -0.25))


def test_deepnet_core_torchscale_initialisation():
    """torchscale: Post-LN's initialisation (same seed), fc1/fc2/v/out weights and biases divided by
    (N^4 M)^(1/16) / 1.15 in the encoder, (12M)^(1/4) in the decoder; q/k untouched."""
    plain = core_model("postln", DN_N, DN_M, init_style="fairseq")
    scaled = core_model("deepnet", DN_N, DN_M, init_style="fairseq", deepnet_init="torchscale")
    for stack, divisor in (("encoder", (DN_N**4 * DN_M) ** 0.0625 / 1.15), ("decoder", (12 * DN_M) ** 0.25)):
        for ref, layer in zip(getattr(plain, stack).layers, getattr(scaled, stack).layers):
            pairs = [(layer.fc1, ref.fc1, 1 / divisor), (layer.fc2, ref.fc2, 1 / divisor)]
            for a, b in zip(attns([layer]), attns([ref])):
                pairs += [(getattr(a, k), getattr(b, k), 1 / divisor) for k in ("v_proj", "out_proj")]
                pairs += [(getattr(a, k), getattr(b, k), 1.0) for k in ("q_proj", "k_proj")]
            for proj, ref_proj, factor in pairs:
                torch.testing.assert_close(proj.weight, ref_proj.weight * factor)
                torch.testing.assert_close(proj.bias, ref_proj.bias * factor)


# Magneto (Wang et al. 2022, "Foundation Transformers"; torchscale's `if args.subln`): self-attention
# v/out and fc1/fc2, weights and biases, x gamma: encoder sqrt(log(3M) log(2N) / 3), decoder sqrt(log(3M)),
# decoder-only sqrt(log(2M)). At 5L-3L: 1.29862 and 1.48230 (1.27177 for the encoder with N and M swapped).
SL_N, SL_M = 5, 3


def test_subln_core_initialisation():
    """Magneto's gain on what ``subln_init="none"`` builds from the same seed; the inner LayerNorms
    (d wide before the self-attention's out_proj, FFN wide before fc2), none in the encoder attention."""
    magneto = core_model("subln", SL_N, SL_M)
    plain = core_model("subln", SL_N, SL_M, subln_init="none")
    encoder_gain = math.sqrt(math.log(3 * SL_M) * math.log(2 * SL_N) / 3)
    decoder_gain = math.sqrt(math.log(3 * SL_M))
    for stack, gain in (("encoder", encoder_gain), ("decoder", decoder_gain)):
        assert getattr(magneto, stack).layer_norm is not None  # Pre-LN's final LayerNorm
        for ref, layer in zip(getattr(plain, stack).layers, getattr(magneto, stack).layers):
            assert layer.self_attn.out_proj.norm.normalized_shape == (D,)
            assert layer.fc2.norm.normalized_shape == (FFN,)
            assert torch.all(layer.fc2.norm.weight == 1) and torch.all(layer.fc2.norm.bias == 0)
            pairs = [(layer.self_attn, ref.self_attn, k, gain) for k in ("v_proj", "out_proj")]
            pairs += [(layer, ref, k, gain) for k in ("fc1", "fc2")]
            pairs += [(layer.self_attn, ref.self_attn, k, 1.0) for k in ("q_proj", "k_proj")]
            if stack == "decoder":
                assert type(layer.encoder_attn.out_proj) is torch.nn.Linear
                pairs += [(layer.encoder_attn, ref.encoder_attn, k, 1.0) for k in ("v_proj", "out_proj")]
            for owner, ref_owner, name, factor in pairs:
                proj, ref_proj = getattr(owner, name), getattr(ref_owner, name)
                torch.testing.assert_close(proj.weight, ref_proj.weight * factor, msg=f"{stack} {name}")
                torch.testing.assert_close(proj.bias, ref_proj.bias * factor, msg=f"{stack} {name} bias")
        # and absolutely: fc1 is Xavier-uniform (init_style paper) times the gain
        assert_matrix_stds(getattr(magneto, stack).layers, dict(fc1=gain))
    lm = layernorm_methods.build_language_model("subln", VOCAB, layers=SL_M, embed_dim=D, ffn_embed_dim=FFN)
    assert_matrix_stds(lm.decoder.layers, dict(fc1=math.sqrt(math.log(2 * SL_M))))
