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
    assert lm.decoder.output_projection.weight is lm.decoder.embed_tokens.weight  # tied by default


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--encoder-learned-pos"], "--encoder-learned-pos"),
        (["--decoder-layerdrop", "0.1"], "--decoder-layerdrop"),
        (["--decoder-embed-dim", "16"], "embed_dim"),
    ],
)
def test_a_fairseq_model_the_core_cannot_build_is_refused(tiny_data_bin, flags, named):
    from conftest import TINY_MODEL, parse

    from layernorm_methods.transfer import configure_like

    args = parse(tiny_data_bin, "transformer_preln", *TINY_MODEL, *flags)
    with pytest.raises(ValueError, match=named):
        configure_like("preln", args)
