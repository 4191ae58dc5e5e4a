"""Audit findings of issue 82, items 1-5, each held here: ResiDual's zero constants honoured,
``--norm-type rmsnorm`` leaving no LayerNorm anywhere, DLCL scripting (``test_torchscript.py``),
a method's model class building its method whatever args it is given, and Mix-LN at a depth
where its rule leaves no Post-LN layer."""

import logging

import pytest
import torch
from conftest import TINY_MODEL, batch, build, parse, plugin_archs
from fairseq import tasks
from fairseq.models import MODEL_REGISTRY

from fairseq_layernorm_plugins.models.base import ARCH_FAMILIES
from fairseq_layernorm_plugins.models.base_lm import LM_FAMILIES
from layernorm_methods.methods.mixln import MIXLN_POST_RATIO

TINY_LM = ["--task", "language_modeling", "--tokens-per-sample", "32", "--decoder-layers", "2"]
TINY_LM += ["--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2"]
TOKENS = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 11, 2, 1]])


# --- 1. ResiDual: --residual-alpha 0 and --residual-dual-scale 0 are the values asked for


def residual_encoder_by_hand(encoder, alpha, scale):
    """alpha x_L + LN(d_L), d = s x_0 + s sum f_i, re-computed sub-layer by sub-layer (dropout off)."""
    with torch.no_grad():
        x = encoder.forward_embedding(TOKENS)[0].transpose(0, 1)
        pad = TOKENS.eq(1)
        dual = scale * x
        for layer in encoder.layers:
            f = layer.self_attn(x, x, x, key_padding_mask=pad, need_weights=False)[0]
            dual, x = dual + scale * f, layer.self_attn_layer_norm(x + f)
            f = layer.fc2(torch.relu(layer.fc1(x)))
            dual, x = dual + scale * f, layer.final_layer_norm(x + f)
        return alpha * x + encoder.layer_norm.norm(dual)


@pytest.mark.parametrize(("alpha", "scale"), [(0.0, 0.5), (0.8, 0.0), (0.0, 0.0)])
def test_residual_zero_alpha_and_zero_dual_scale_are_honoured(tiny_data_bin, alpha, scale):
    flags = ("--residual-alpha", alpha, "--residual-dual-scale", scale)
    model, _, _ = build(tiny_data_bin, "transformer_residual", *TINY_MODEL, *flags)
    encoder = model.eval().encoder
    for stack in (model.encoder, model.decoder):
        assert stack.layer_norm.alpha == alpha and stack.layer_norm.stream.scale == scale
    with torch.no_grad():
        got = encoder(TOKENS, src_lengths=torch.tensor([5, 4]))["encoder_out"][0]
    torch.testing.assert_close(got, residual_encoder_by_hand(encoder, alpha, scale))


def test_residual_constants_left_unset_are_the_authors_one(tiny_data_bin):
    """Not given (the arch's None, as in checkpoints saved so far): s = alpha = 1.0."""
    model, _, args = build(tiny_data_bin, "transformer_residual", *TINY_MODEL)
    assert args.residual_alpha is None and args.residual_dual_scale is None
    assert model.encoder.layer_norm.alpha == 1.0 and model.encoder.layer_norm.stream.scale == 1.0


# --- 2. --norm-type rmsnorm: no LayerNorm left in any model of any method


def layer_norms_left(model):
    """Paths of torch's LayerNorm (what fairseq's ``LayerNorm`` builds) and of any class named
    like one (apex's FusedLayerNorm, fairseq's Fp32LayerNorm)."""
    return [
        name
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.LayerNorm) or type(m).__name__.endswith("LayerNorm")
    ]


@pytest.mark.parametrize("family", sorted(ARCH_FAMILIES))
def test_rmsnorm_replaces_every_layer_norm(tiny_data_bin, family):
    model, _, _ = build(tiny_data_bin, family, *TINY_MODEL, "--norm-type", "rmsnorm")
    assert layer_norms_left(model) == []
    normless = family in ("transformer_tfixup", "transformer_rezero", "transformer_dyt")
    assert any(isinstance(m, torch.nn.RMSNorm) for m in model.modules()) is not normless


@pytest.mark.parametrize("family", sorted(LM_FAMILIES))
def test_rmsnorm_replaces_every_layer_norm_of_a_language_model(lm_data_bin, family):
    model, _, _ = build(lm_data_bin, family, *TINY_LM, "--norm-type", "rmsnorm")
    assert layer_norms_left(model) == []


def test_residual_output_norm_is_rmsnorm_with_its_eps(tiny_data_bin):
    model, _, _ = build(tiny_data_bin, "transformer_residual", *TINY_MODEL, "--norm-type", "rmsnorm")
    for stack in (model.encoder, model.decoder):
        assert type(stack.layer_norm.norm) is torch.nn.RMSNorm and stack.layer_norm.norm.eps == 1e-7


# --- 4. a method's model class builds its method, whatever args it is given


def other_archs_args(data_bin, parsed_as, arch, *flags):
    """Args a notebook has: parsed for ``parsed_as`` (its architecture's defaults filled in),
    then ``args.arch`` swapped."""
    args = parse(data_bin, parsed_as, *flags)
    args.arch = arch
    return args


def assert_same_model_and_logits(ours, reference, task):
    theirs = reference.state_dict()
    assert ours.state_dict().keys() == theirs.keys()
    for key, value in ours.state_dict().items():
        torch.testing.assert_close(value, theirs[key], rtol=0, atol=0, msg=key)
    net_input = batch(task)["net_input"]
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(**net_input)[0], reference.eval()(**net_input)[0], rtol=0, atol=0)


def test_preln_model_from_the_transformers_args_is_pre_ln(tiny_data_bin):
    """``--arch transformer`` parsed (``encoder_normalize_before=False``), arch swapped:
    ``TransformerPreLNModel.build_model`` builds Pre-LN layers and the final LayerNorms."""
    args = other_archs_args(tiny_data_bin, "transformer", "transformer_preln", *TINY_MODEL)
    assert args.encoder_normalize_before is False
    task = tasks.setup_task(args)
    torch.manual_seed(1)
    model = MODEL_REGISTRY["transformer_preln"].build_model(args, task)
    for stack in (model.encoder, model.decoder):
        assert all(layer.normalize_before for layer in stack.layers)
        assert isinstance(stack.layer_norm, torch.nn.LayerNorm)
    reference, _, _ = build(tiny_data_bin, "transformer_preln", *TINY_MODEL, seed=1)
    assert_same_model_and_logits(model, reference, task)


@pytest.mark.parametrize("family", sorted(ARCH_FAMILIES))
def test_every_model_class_from_the_transformers_args_is_its_method(tiny_data_bin, family):
    """Every method's model class, from args parsed for fairseq's Post-LN ``transformer``:
    the model ``--arch FAMILY`` builds (the Pre-LN family's placement whatever the args say)."""
    args = other_archs_args(tiny_data_bin, "transformer", family, *TINY_MODEL)
    task = tasks.setup_task(args)
    torch.manual_seed(1)
    model = MODEL_REGISTRY[family].build_model(args, task)
    reference, _, _ = build(tiny_data_bin, family, *TINY_MODEL, seed=1)
    assert (model.cfg.encoder.normalize_before, model.cfg.decoder.normalize_before) == (
        reference.cfg.encoder.normalize_before,
        reference.cfg.decoder.normalize_before,
    )
    assert_same_model_and_logits(model, reference, task)


@pytest.mark.parametrize("family", sorted(f for f in ARCH_FAMILIES if ARCH_FAMILIES[f].normalize_before is False))
def test_post_ln_model_class_refuses_pre_ln_args_naming_option_and_arch(tiny_data_bin, family):
    """A Post-LN method given ``encoder_normalize_before=True`` (args parsed for Pre-LN): one
    clear error naming the option and the arch, not a Pre-LN model under the method's name."""
    args = other_archs_args(tiny_data_bin, "transformer_preln", family, *TINY_MODEL)
    task = tasks.setup_task(args)
    with pytest.raises(ValueError, match=rf"^{family}: .*--(en|de)coder-normalize-before"):
        MODEL_REGISTRY[family].build_model(args, task)


def test_pre_ln_language_model_from_a_post_ln_lms_args_is_pre_ln(lm_data_bin):
    args = other_archs_args(lm_data_bin, "transformer_lm_postln", "transformer_lm_preln", *TINY_LM)
    assert args.decoder_normalize_before is False
    task = tasks.setup_task(args)
    model = MODEL_REGISTRY["transformer_lm_preln"].build_model(args, task)
    assert all(layer.normalize_before for layer in model.decoder.layers)
    assert isinstance(model.decoder.layer_norm, torch.nn.LayerNorm)


def test_pre_ln_arch_function_over_post_ln_args_is_pre_ln(tiny_data_bin):
    """The arch function path alike: ``transformer_preln``'s function on the transformer's args."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    args = parse(tiny_data_bin, "transformer", *TINY_MODEL)
    ARCH_CONFIG_REGISTRY["transformer_preln_iwslt_de_en"](args)
    assert args.encoder_normalize_before is True and args.decoder_normalize_before is True


# --- 5. Mix-LN at 2 layers: floor(0.25 x 2) = 0 Post-LN layers, exactly Pre-LN


MIXLN_LOGGER = "layernorm_methods.methods.mixln"


def mixln_warnings(caplog, data_bin, *flags):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=MIXLN_LOGGER):
        model, task, _ = build(data_bin, "transformer_mixln", *TINY_MODEL, *flags)
    return model, task, [r.getMessage() for r in caplog.records if r.name == MIXLN_LOGGER]


def test_mixln_warns_where_its_rule_leaves_no_post_ln_layer(tiny_data_bin, caplog):
    assert MIXLN_POST_RATIO == 0.25
    _, _, warned = mixln_warnings(caplog, tiny_data_bin)  # 2 layers per stack
    assert len(warned) == 2, warned  # the encoder and the decoder
    for message, kind in zip(warned, ("encoder", "decoder")):
        assert kind in message and "2 layers" in message and "floor(0.25 x 2) = 0" in message
        assert "Pre-LN" in message and "Li et al. 2024" in message
    _, _, warned = mixln_warnings(caplog, tiny_data_bin, "--encoder-layers", "8", "--decoder-layers", "8")
    assert warned == []  # floor(0.25 x 8) = 2
    _, _, warned = mixln_warnings(caplog, tiny_data_bin, "--mixln-post-layers", "1")
    assert warned == []


def test_mixln_at_two_layers_is_pre_ln(tiny_data_bin, caplog):
    """Same weights, same logits: at the Multi30k recipes' depth Mix-LN is Pre-LN."""
    mixln, task, _ = mixln_warnings(caplog, tiny_data_bin)
    preln, _, _ = build(tiny_data_bin, "transformer_preln", *TINY_MODEL)
    preln.load_state_dict(mixln.state_dict())
    assert all(layer.normalize_before for layer in mixln.encoder.layers + mixln.decoder.layers)
    net_input = batch(task)["net_input"]
    with torch.no_grad():
        torch.testing.assert_close(mixln.eval()(**net_input)[0], preln.eval()(**net_input)[0], rtol=0, atol=0)


def test_every_plugin_arch_is_covered_here():
    """The families above are every registered method's (one per model)."""
    assert set(plugin_archs().values()) == set(ARCH_FAMILIES)
    assert set(plugin_archs("lm").values()) == set(LM_FAMILIES)
