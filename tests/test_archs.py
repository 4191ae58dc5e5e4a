"""Every registered architecture builds, runs forward/backward, and has the structure
its paper prescribes."""

import argparse

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_MODEL, batch, build, hand_set_layer_norms, parse, plugin_archs
from conftest import ffn as _ffn
from fairseq.distributed import FullyShardedDataParallel
from fairseq.models.transformer import TransformerConfig

from fairseq_layernorm_plugins.models.base import ARCH_FAMILIES, ARCH_SIZES
from fairseq_layernorm_plugins.modules import PluginEncoderLayer, PluginTransformerEncoder, Stack

ARCHS = plugin_archs()


@pytest.mark.parametrize("model", ["transformer_preln", "transformer_tfixup", "transformer_b2t", "transformer_deepnet"])
def test_registry_has_every_method_and_size(model):
    expected = {model + suffix for suffix in ARCH_SIZES}
    assert expected <= set(ARCHS)
    assert all(ARCHS[a] == model for a in expected)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_arch_forward_backward_finite(tiny_data_bin, arch):
    model, task, _ = build(tiny_data_bin, arch, *TINY_MODEL)
    sample = batch(task)
    model.train()
    logits, _ = model(**sample["net_input"])
    assert logits.shape[:2] == sample["target"].shape
    loss = F.cross_entropy(
        logits.view(-1, logits.size(-1)), sample["target"].view(-1), ignore_index=task.target_dictionary.pad()
    )
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{arch}: {name} gets no gradient (DDP would fail)"
        assert torch.isfinite(p.grad).all(), f"{arch}: non-finite gradient in {name}"


@pytest.mark.parametrize("model", sorted(ARCH_FAMILIES))
@pytest.mark.parametrize("suffix", sorted(ARCH_SIZES))
def test_size_variants_chain_to_fairseq_archs(tiny_data_bin, model, suffix):
    """Each size = fairseq's arch of that size, with only the method's own settings changed."""
    ours = vars(parse(tiny_data_bin, model + suffix))
    fairseq_arch = {
        "": "transformer",
        "_iwslt_de_en": "transformer_iwslt_de_en",
        "_wmt_en_de": "transformer_wmt_en_de",
        "_wmt_en_de_big": "transformer_wmt_en_de_big",
        "_wmt_en_de_deep": "transformer_wmt_en_de",
    }[suffix]
    theirs = vars(parse(tiny_data_bin, fairseq_arch))
    differ = {k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k)}
    method_settings = argparse.Namespace()
    ARCH_FAMILIES[model](method_settings)
    expected = {"arch", "_name", "init_style", "fused_attention", "norm_type"} | set(vars(method_settings))
    # every plugin arch starts as its authors' models did (B2T's fork: fairseq 0.12's nn.Linear FFN)
    # fairseq 0.12's where the authors' code builds its layers (B2T's fork, ResiDual's plugin)
    assert ours["init_style"] == ("fairseq" if model in ("transformer_b2t", "transformer_residual") else "paper")
    assert ours["fused_attention"] is False  # fairseq's own attention path unless asked for
    assert ours["norm_type"] == "layernorm"
    if suffix == "_wmt_en_de_deep":
        expected |= {"encoder_layers", "decoder_layers"}
        assert (ours["encoder_layers"], ours["decoder_layers"]) == (18, 18)
    assert differ <= expected, f"unexpected differences: {differ - expected}"
    assert all(ours[k] == v for k, v in vars(method_settings).items())
    if model == "transformer_preln":
        assert ours["encoder_normalize_before"] and ours["decoder_normalize_before"]
        assert not theirs["encoder_normalize_before"]


def test_depth_from_command_line(tiny_data_bin):
    args = parse(tiny_data_bin, "transformer_preln_wmt_en_de_deep", "--encoder-layers", "60", "--decoder-layers", "12")
    assert (args.encoder_layers, args.decoder_layers) == (60, 12)
    assert args.encoder_embed_dim == 512


def test_preln_structure(tiny_data_bin):
    model, _, _ = build(tiny_data_bin, "transformer_preln_iwslt_de_en", *TINY_MODEL)
    for stack in (model.encoder, model.decoder):
        assert isinstance(stack.layer_norm, torch.nn.LayerNorm), "Pre-LN needs a final LayerNorm on each stack"
        assert all(layer.normalize_before for layer in stack.layers)


def test_preln_drops_the_final_norm_only_when_asked(tiny_data_bin):
    """fairseq's ``--no-decoder-final-norm`` (the B2T authors' Pre-LN LM): the decoder's final
    LayerNorm goes, the encoder's stays; DLCL, whose output is that norm of its history, refuses."""
    model, _, _ = build(tiny_data_bin, "transformer_preln_iwslt_de_en", *TINY_MODEL, "--no-decoder-final-norm")
    assert model.decoder.layer_norm is None
    assert isinstance(model.encoder.layer_norm, torch.nn.LayerNorm)
    assert all(layer.normalize_before for layer in model.decoder.layers)
    with pytest.raises(ValueError, match="combined history"):
        build(tiny_data_bin, "transformer_dlcl_iwslt_de_en", *TINY_MODEL, "--no-decoder-final-norm")


def retained_dropout(model):
    """Paths of the dropout modules that stay on in eval mode."""
    from fairseq.modules import FairseqDropout

    return {name for name, m in model.named_modules() if isinstance(m, FairseqDropout) and m.apply_during_inference}


@pytest.mark.parametrize("arch", sorted(a for a in ARCHS if a.endswith("_iwslt_de_en")))
def test_retain_dropout_modules_takes_the_names_of_fairseqs_transformer(tiny_data_bin, arch):
    """``fairseq-generate --retain-dropout --retain-dropout-modules TransformerEncoder
    TransformerEncoderLayerBase`` keeps the same dropout modules on as for stock fairseq."""
    names = ["TransformerEncoder", "TransformerEncoderLayerBase"]
    stock = build(tiny_data_bin, "transformer_iwslt_de_en", *TINY_MODEL, "--dropout", "0.3")[0]
    model, task, _ = build(tiny_data_bin, arch, *TINY_MODEL, "--dropout", "0.3")
    for m in (stock, model):
        m.make_generation_fast_(retain_dropout=True, retain_dropout_modules=names)
    kept = retained_dropout(model)
    assert kept == retained_dropout(stock)
    assert {"encoder.dropout_module", "encoder.layers.0.dropout_module"} <= kept and not any(
        n.startswith("decoder") for n in kept
    )
    src = batch(task)["net_input"]
    with torch.no_grad():
        a, b = (model.encoder(src["src_tokens"], src["src_lengths"])["encoder_out"][0] for _ in range(2))
    assert not model.training and not torch.allclose(a, b)  # dropout still on in eval


def test_preln_encoder_layer_equations(tiny_data_bin):
    """x1 = x + Attn(LN1(x)); out = x1 + FFN(LN2(x1))  (Xiong et al. 2020, Fig. 1 (b)); every
    LayerNorm with its own gamma and beta, so using the wrong one (or none) shows."""
    model, _, _ = build(tiny_data_bin, "transformer_preln_iwslt_de_en", *TINY_MODEL)
    hand_set_layer_norms(model).eval()
    layer = model.encoder.layers[0]
    x = torch.randn(5, 3, 32)  # (S, B, C)
    pad = torch.zeros(3, 5, dtype=torch.bool)
    pad[0, -2:] = True
    h = layer.self_attn_layer_norm(x)
    x1 = x + layer.self_attn(h, h, h, key_padding_mask=pad, need_weights=False)[0]
    expected = x1 + _ffn(layer, layer.final_layer_norm(x1))
    torch.testing.assert_close(layer(x, pad), expected)


def test_preln_decoder_layer_equations(tiny_data_bin):
    """x1 = x + SelfAttn(LN(x)); x2 = x1 + CrossAttn(LN(x1)); out = x2 + FFN(LN(x2)), each LN its own."""
    model, _, _ = build(tiny_data_bin, "transformer_preln_iwslt_de_en", *TINY_MODEL)
    hand_set_layer_norms(model).eval()
    layer = model.decoder.layers[0]
    x, enc = torch.randn(4, 2, 32), torch.randn(6, 2, 32)  # (T, B, C), (S, B, C)
    causal = torch.triu(torch.full((4, 4), float("-inf")), 1)
    h = layer.self_attn_layer_norm(x)
    x1 = x + layer.self_attn(h, h, h, attn_mask=causal, need_weights=False)[0]
    h = layer.encoder_attn_layer_norm(x1)
    x2 = x1 + layer.encoder_attn(h, enc, enc, need_weights=False)[0]
    expected = x2 + _ffn(layer, layer.final_layer_norm(x2))
    out = layer(x, encoder_out=enc, encoder_padding_mask=None, self_attn_mask=causal)[0]
    torch.testing.assert_close(out, expected)


class DoubledResidualLayer(PluginEncoderLayer):
    """Records what the two method hooks are given."""

    def method_init_(self, cfg, stack):
        super().method_init_(cfg, stack)
        self.stack = stack

    @classmethod
    def init_stack_(cls, stack_module, cfg, stack):
        stack_module.initialised_as = stack

    def residual_connection(self, x, residual):
        return x + 2 * residual


class DoubledResidualEncoder(PluginTransformerEncoder):
    layer_cls = DoubledResidualLayer


@pytest.mark.parametrize("checkpoint_activations", [False, True])
def test_stacks_build_the_methods_layer_class(tiny_data_bin, checkpoint_activations):
    """The hook later methods use: a stack subclass swaps in its own layer class and
    keeps fairseq's activation-checkpoint wrapping."""
    flags = ["--checkpoint-activations"] if checkpoint_activations else []
    model, task, args = build(tiny_data_bin, "transformer_preln_iwslt_de_en", *TINY_MODEL, *flags)
    cfg = TransformerConfig.from_namespace(args)
    encoder = DoubledResidualEncoder(cfg, task.source_dictionary, model.encoder.embed_tokens)
    assert all(type(layer) is DoubledResidualLayer for layer in encoder.layers)
    # each layer and, once, the whole stack are told which stack they are: the encoder, 2 layers of d=32
    assert {layer.stack for layer in encoder.layers} == {Stack("encoder", 2, 32)} == {encoder.initialised_as}
    # fairseq's checkpoint_wrapper patches forward in place and keeps the original here
    assert all(hasattr(layer, "precheckpoint_forward") == checkpoint_activations for layer in encoder.layers)
    encoder.load_state_dict(model.encoder.state_dict())
    encoder.eval(), model.eval()
    src = batch(task)["net_input"]
    ours = encoder(src["src_tokens"], src["src_lengths"])["encoder_out"][0]
    base = model.encoder(src["src_tokens"], src["src_lengths"])["encoder_out"][0]
    assert not torch.allclose(ours, base), "the swapped-in residual_connection was not used"


class FakeShardedLayer(FullyShardedDataParallel):
    """What fairseq's fsdp_wrap returns under ``--ddp-backend fully_sharded`` (fairscale's
    wrapper, here without fairscale: a module holding the layer)."""

    def __init__(self, layer):
        torch.nn.Module.__init__(self)
        self.module = layer


@pytest.mark.parametrize(
    ("arch", "refused"),
    [
        ("transformer_mixln_iwslt_de_en", True),
        ("transformer_dlcl_iwslt_de_en", True),
        ("transformer_preln_iwslt_de_en", False),
    ],
)
def test_a_method_that_sets_up_its_layers_refuses_fsdp_wrapped_layers(tiny_data_bin, monkeypatch, arch, refused):
    """Under fully-sharded data parallel each layer is wrapped as it is built; a method that
    then sets its layers up (Mix-LN's placement, DLCL's history) would set the wrapper's
    attributes, not the layer's, and is refused in one line; Pre-LN, which sets nothing up,
    builds."""
    from fairseq_layernorm_plugins.modules import stacks

    monkeypatch.setattr(stacks, "fsdp_wrap", lambda layer, min_num_params=None: FakeShardedLayer(layer))
    if refused:
        with pytest.raises(ValueError, match=r"--ddp-backend fully_sharded wraps each layer .* --ddp-backend c10d"):
            build(tiny_data_bin, arch, *TINY_MODEL)
    else:
        model, _, _ = build(tiny_data_bin, arch, *TINY_MODEL)
        assert all(isinstance(layer, FakeShardedLayer) for layer in model.encoder.layers)
