"""The core's model-building interface: every method the plugin registers is in the core, its
defaults are the fairseq archs', and what a method cannot honour is refused in one line."""

import pytest

import layernorm_methods
from layernorm_methods import build_language_model, build_model, configure


def test_every_registered_method_is_in_the_core():
    from fairseq_layernorm_plugins.methods import METHODS

    assert sorted(METHODS) == layernorm_methods.method_names()


def test_defaults_are_the_methods_own_and_given_values_win():
    assert configure("b2t").init_style == "fairseq"  # the B2T authors' fork
    assert configure("postln").init_style == "paper"
    assert configure("b2t", init_style="paper").init_style == "paper"
    assert configure("deepnet").deepnet_init == "paper"
    assert configure("deepnet", deepnet_init="torchscale").deepnet_init == "torchscale"


def test_placement_is_the_methods_family():
    assert configure("preln").encoder.normalize_before and configure("preln").decoder.normalize_before
    assert not configure("postln").encoder.normalize_before and not configure("b2t").decoder.normalize_before


def test_an_unknown_option_is_named():
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['b2t_no_layernorm'\]"):
        configure("b2t", b2t_no_layernorm=True)
    with pytest.raises(ValueError, match="unknown method 'b2t_x'"):
        configure("b2t_x")


@pytest.mark.parametrize(
    "method, setting",
    [("tfixup", "layernorm_embedding"), ("rezero", "layernorm_embedding"), ("dlcl", "no_decoder_final_norm")],
)
def test_a_setting_the_method_cannot_honour_is_refused(method, setting):
    with pytest.raises(ValueError, match=f"{method}: drop {setting}"):
        configure(method, **{setting: True})


def test_built_models_have_the_requested_sizes():
    model = build_model(
        "preln", 40, 50, encoder_layers=3, decoder_layers=2, embed_dim=16, ffn_embed_dim=24, attention_heads=2
    )
    assert len(model.encoder.layers) == 3 and len(model.decoder.layers) == 2
    assert model.decoder.output_projection.weight.shape == (50, 16)
    lm = build_language_model("b2t", 30, layers=4, embed_dim=16, ffn_embed_dim=24, attention_heads=2)
    assert len(lm.decoder.layers) == 4 and all(layer.encoder_attn is None for layer in lm.decoder.layers)
    assert lm.decoder.output_projection.weight is not lm.decoder.embed_tokens.weight  # fairseq's default: untied
    tied = build_language_model("b2t", 30, layers=1, embed_dim=16, share_decoder_input_output_embed=True)
    assert tied.decoder.output_projection.weight is tied.decoder.embed_tokens.weight


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--encoder-learned-pos"], "--encoder-learned-pos"),
        (["--decoder-layerdrop", "0.1"], "--decoder-layerdrop"),
        (["--decoder-embed-dim", "16"], "embed_dim"),
        (["--cross-self-attention"], "--cross-self-attention"),
        (["--enc-replace-rate", "0.1"], "--enc-replace-rate"),
    ],
)
def test_a_fairseq_model_the_core_cannot_build_is_refused(tiny_data_bin, flags, named):
    from conftest import TINY_MODEL, parse

    from layernorm_methods.transfer import configure_like

    args = parse(tiny_data_bin, "transformer_preln", *TINY_MODEL, *flags)
    with pytest.raises(ValueError, match=named):
        configure_like("preln", args)


def test_a_layer_on_its_own_is_the_methods_layer():
    """A single layer from the method's name, as the docs show: B2T's decoder-only block adds the
    layer's input at its last sub-layer (Takase et al. 2023, Eq. 5), recomputed here."""
    import torch

    from layernorm_methods import Stack, get_method

    cfg = configure("b2t", decoder_layers=4, embed_dim=8, ffn_embed_dim=16, attention_heads=2, dropout=0.0)
    layer = get_method("b2t").decoder_layer(cfg, no_encoder_attn=True, stack=Stack("lm", 4, 8)).eval()
    x = torch.randn(5, 2, 8)
    with torch.no_grad():
        causal = torch.full((5, 5), float("-inf")).triu(1)
        attn = torch.nn.functional.scaled_dot_product_attention
        heads = lambda t: t.view(5, 2, 2, 4).permute(1, 2, 0, 3)
        a = layer.self_attn
        y = attn(heads(a.q_proj(x)), heads(a.k_proj(x)), heads(a.v_proj(x)), attn_mask=causal)
        h = layer.self_attn_layer_norm(x + a.out_proj(y.permute(2, 0, 1, 3).reshape(5, 2, 8)))
        expected = layer.final_layer_norm(x + h + layer.fc2(torch.relu(layer.fc1(h))))
        assert torch.allclose(layer(x), expected, atol=1e-6)


def test_relu_dropout_is_the_activation_dropout_when_that_is_zero(tiny_data_bin):
    """fairseq's layers fall back to --relu-dropout when --activation-dropout is 0."""
    from conftest import TINY_MODEL, parse

    from layernorm_methods.transfer import configure_like

    args = parse(tiny_data_bin, "transformer_preln", *TINY_MODEL, "--relu-dropout", "0.3")
    assert configure_like("preln", args).activation_dropout == 0.3


TINY_SIZES = dict(embed_dim=32, ffn_embed_dim=64, attention_heads=2)


def fairseq_and_core_configs(data_bin, method, kind):
    """(the config of the fairseq arch at its defaults, the core's ``configure`` at its defaults),
    the same tiny sizes."""
    from conftest import TINY_MODEL, parse
    from helpers.core_equality import TINY_LM

    from fairseq_layernorm_plugins.methods import METHODS
    from layernorm_methods.transfer import configure_like

    if kind == "lm":
        args = parse(data_bin, METHODS[method].lm_arch(), *TINY_LM, "--decoder-layers", "2")
        return configure_like(method, args, "lm"), configure(method, encoder_layers=0, decoder_layers=2, **TINY_SIZES)
    args = parse(data_bin, METHODS[method].arch(), *TINY_MODEL)
    return configure_like(method, args), configure(method, encoder_layers=2, decoder_layers=2, **TINY_SIZES)


@pytest.mark.parametrize("method", layernorm_methods.method_names())
def test_core_defaults_are_the_fairseq_archs(tiny_data_bin, lm_data_bin, method):
    """``configure(method)`` builds what ``transformer_<method>`` and ``transformer_lm_<method>``
    build at their defaults: every setting and option."""
    from fairseq_layernorm_plugins.methods import METHODS

    kinds = [("translation", tiny_data_bin)] + ([("lm", lm_data_bin)] if METHODS[method].lm_model else [])
    for kind, data_bin in kinds:
        theirs, ours = fairseq_and_core_configs(data_bin, method, kind)
        assert vars(ours) == vars(theirs), kind


@pytest.mark.parametrize("method", layernorm_methods.method_names())
def test_same_seed_same_initial_weights(tiny_data_bin, method):
    """A core model built after ``torch.manual_seed(s)`` starts from the weights ``fairseq-train
    --seed s`` builds (the same draws in the same order)."""
    import torch
    from conftest import TINY_MODEL, build

    from fairseq_layernorm_plugins.methods import METHODS
    from layernorm_methods import EncoderDecoderModel
    from layernorm_methods.transfer import configure_like, core_state_dict

    model, task, args = build(tiny_data_bin, METHODS[method].arch(), *TINY_MODEL, seed=5)
    torch.manual_seed(5)
    core = EncoderDecoderModel(configure_like(method, args), len(task.source_dictionary), len(task.target_dictionary))
    theirs, ours = core_state_dict(model.state_dict()), core.state_dict()
    assert theirs.keys() == ours.keys()
    assert all(torch.equal(theirs[name], ours[name]) for name in ours), method


def test_a_core_model_pickles_whole():
    """``torch.save(model)`` (the whole module, not its state dict) and back: the layer classes
    the registry makes are found by name."""
    import io

    import torch

    model = build_model("b2t", 20, encoder_layers=1, decoder_layers=1, **TINY_SIZES).eval()
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    tokens = torch.randint(4, 20, (2, 5))
    assert torch.equal(loaded(tokens, tokens), model(tokens, tokens))


def test_without_a_padding_token_every_token_counts():
    """``padding_idx=None``: token 1 is a token like any other (with fairseq's default, 1 is
    padding and drops out of attention and positions)."""
    import torch

    tokens = torch.tensor([[5, 1, 7, 9]])
    for padding_idx, differs in ((None, True), (1, False)):
        torch.manual_seed(0)
        lm = build_language_model("preln", 12, layers=1, padding_idx=padding_idx, **TINY_SIZES).eval()
        with torch.no_grad():
            with_1 = lm(tokens)[0, -1]
            without = lm(tokens[:, [0, 2, 3]])[0, -1]
        assert (not torch.allclose(with_1, without)) == differs, padding_idx
