"""A fairseq model's weights in a core model: the core's modules carry fairseq's names
(``encoder.layers.0.self_attn.q_proj.weight``, ``decoder.output_projection.weight``, ...), so
the transfer drops only what holds no weight (fairseq's ``version`` markers, the positional
embeddings' ``_float_tensor`` device marker) and loads the rest strictly."""

NOT_WEIGHTS = (".version", "._float_tensor", "embed_positions.weights")
# fairseq options that change what its layers compute and that the core layers lack
NOT_IN_THE_CORE = (
    "cross_self_attention",
    "scale_attn",
    "scale_fc",
    "scale_heads",
    "scale_resids",
    "enc_replace_rate",  # the B2T fork's word dropout (fairseq_layernorm_plugins/modules/word_dropout.py)
    "dec_replace_rate",
)


def core_state_dict(fairseq_state):
    """``fairseq_state`` (a fairseq model's ``state_dict()``, or a checkpoint's ``"model"``)
    without the entries that are not weights."""
    return {name: value for name, value in fairseq_state.items() if not name.endswith(NOT_WEIGHTS)}


def load_fairseq_state_dict(model, fairseq_state):
    """Load a fairseq plugin model's weights (same method, same sizes) into the core ``model``;
    RuntimeError from ``load_state_dict`` naming any missing or unexpected weight."""
    model.load_state_dict(core_state_dict(fairseq_state), strict=True)
    return model


def configure_like(method, args, kind="translation"):
    """The core :class:`TransformerConfig` of the fairseq model that ``args`` (its argparse
    namespace, architecture defaults applied; a checkpoint's ``args``) builds: ``kind``
    ``translation`` (``transformer_<method>``) or ``lm`` (``transformer_lm_<method>``).
    ValueError for what the core does not build (unequal encoder and decoder widths, learned
    positions, adaptive input or softmax, LayerDrop, quantisation noise)."""
    from layernorm_methods.models import SETTINGS, configure
    from layernorm_methods.registry import get

    for flag in ("encoder_learned_pos", "decoder_learned_pos", "adaptive_input", "no_token_positional_embeddings"):
        if getattr(args, flag, False):
            raise ValueError(
                f"the core models have sinusoidal positions and plain embeddings: not --{flag.replace('_', '-')}"
            )
    if getattr(args, "adaptive_softmax_cutoff", None):
        raise ValueError("the core models have a plain output projection: not --adaptive-softmax-cutoff")
    for flag in ("encoder_layerdrop", "decoder_layerdrop", "quant_noise_pq"):
        if getattr(args, flag, 0):
            raise ValueError(f"the core models run every layer, unquantised: not --{flag.replace('_', '-')}")
    for flag in NOT_IN_THE_CORE:
        if getattr(args, flag, None):
            raise ValueError(f"the core models do not build fairseq's --{flag.replace('_', '-')}")
    sides = ("decoder",) if kind == "lm" else ("encoder", "decoder")
    sizes = {}
    for size in ("embed_dim", "ffn_embed_dim", "attention_heads"):
        values = {getattr(args, f"{side}_{size}") for side in sides}
        if len(values) > 1:
            raise ValueError(f"the core models have one {size} for both stacks, not {sorted(values)}")
        sizes[size] = values.pop()
    settings = {name: getattr(args, name) for name in SETTINGS if getattr(args, name, None) is not None}
    if not settings.get("activation_dropout") and getattr(args, "relu_dropout", 0):
        settings["activation_dropout"] = args.relu_dropout  # fairseq's layers fall back to it
    options = {
        name: getattr(args, name) for name in get(method).options if hasattr(args, name) and name not in settings
    }
    layers = dict(encoder_layers=0 if kind == "lm" else args.encoder_layers, decoder_layers=args.decoder_layers)
    return configure(method, **layers, **sizes, **settings, **options)
