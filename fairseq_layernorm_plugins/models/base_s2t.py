"""Speech-to-text models of every method: fairseq's ``S2TTransformerModel`` (``--task
speech_to_text``: its convolutional subsampler, args, checkpoints, ``fairseq-generate``
decoding and ``--scoring wer``) whose encoder and decoder layers are the method's
(``modules/speech.py``): the same method code as its translation model.

fairseq's ``s2t_transformer_*`` architectures are all Pre-LN (``encoder/decoder_normalize_before
= True``, with a final LayerNorm on each stack); here the method's family says where its
LayerNorms sit, so ``s2t_transformer_postln_m`` is Post-LN with no final encoder LayerNorm,
as the B2T paper's Post-LN speech baseline (Takase et al. 2023, Sec. 6.4, Table 4).

Methods whose stack set-up needs what a speech encoder does not have are not registered here
(:data:`NOT_FOR_SPEECH`, and ``Method.s2t_arch`` says why in one line): T-Fixup scales the
encoder's token embeddings (a speech encoder reads filter-bank frames through convolutions),
and DLCL runs its stacks' layers in a loop of its own over fairseq's text encoder.
"""

import functools

from fairseq.models.speech_to_text import s2t_transformer
from fairseq.models.speech_to_text.s2t_transformer import S2TTransformerModel

from fairseq_layernorm_plugins.models.base import PluginModelMixin, swapped
from fairseq_layernorm_plugins.models.family import defaults_and_placement, register_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer
from fairseq_layernorm_plugins.modules.speech import PluginS2TDecoder, PluginS2TEncoder

# suffix -> fairseq's speech-to-text arch function that fills in the size defaults
S2T_ARCH_SIZES = {
    "": s2t_transformer.base_architecture,  # 12L-6L, d=512, FFN 2048, 8 heads, dropout 0.1
    "_s": s2t_transformer.s2t_transformer_s,  # 12L-6L, d=256, FFN 2048, 4 heads, dropout 0.1
    "_m": s2t_transformer.s2t_transformer_m,  # 12L-6L, d=512, FFN 2048, 8 heads, dropout 0.15 (B2T Table 4)
    "_l": s2t_transformer.s2t_transformer_l,  # 12L-6L, d=1024, FFN 4096, 16 heads, dropout 0.2
}

# model name -> its ArchFamily: the speech-to-text models
S2T_FAMILIES = {}

# method name -> why it has no speech-to-text model
NOT_FOR_SPEECH = {
    "tfixup": "T-Fixup scales the encoder's token embeddings, and a speech encoder has none (it reads "
    "filter-bank frames through a convolutional subsampler)",
    "dlcl": "DLCL runs its stacks' layers in a loop of its own over fairseq's text encoder",
    "dlcl_postnorm": "DLCL runs its stacks' layers in a loop of its own over fairseq's text encoder",
}


class PluginS2TTransformerModel(PluginModelMixin, S2TTransformerModel):
    """fairseq's ``S2TTransformerModel`` whose encoder and decoder layers are
    :attr:`encoder_layer_cls` and :attr:`decoder_layer_cls`.

    Input ``src_tokens`` (B, T, F) filter-bank frames, ``src_lengths`` (B,),
    ``prev_output_tokens`` (B, U); output logits (B, U, V)."""

    encoder_layer_cls = PluginEncoderLayer
    decoder_layer_cls = PluginDecoderLayer
    encoder_cls = PluginS2TEncoder
    decoder_cls = PluginS2TDecoder
    families = S2T_FAMILIES
    base_size = staticmethod(s2t_transformer.base_architecture)
    scriptable = False  # fairseq's own S2TTransformerModel is not (its encoder's _forward)

    @classmethod
    def add_args(cls, parser):
        S2TTransformerModel.add_args(parser)
        cls.add_plugin_args(parser)
        cls.add_method_args(parser)

    @classmethod
    def build_model(cls, args, task):
        args = cls.plugin_args(args)
        model = super().build_model(args, task)
        model.args = args  # as fairseq's TransformerModel keeps them
        return model

    @classmethod
    def build_encoder(cls, args):
        # fairseq builds S2TTransformerEncoder(args), then loads --load-pretrained-encoder-from into it
        with swapped(
            s2t_transformer, S2TTransformerEncoder=functools.partial(cls.encoder_cls, layer_cls=cls.encoder_layer_cls)
        ):
            return super().build_encoder(args)

    @classmethod
    def build_decoder(cls, args, task, embed_tokens):
        return cls.decoder_cls(args, task.target_dictionary, embed_tokens, layer_cls=cls.decoder_layer_cls)

    def __prepare_scriptable__(self):
        raise RuntimeError(
            f"{type(self).__name__}: fairseq's speech encoder is not scriptable (S2TTransformerEncoder._forward "
            "leaves return_all_hiddens unannotated, so stock s2t_transformer fails the same way); it runs eagerly"
        )


def register_s2t_arch_family(model_name, method_defaults, normalize_before=None):
    """Register ``model_name`` + each suffix of :data:`S2T_ARCH_SIZES` as speech-to-text
    architectures of the method (as ``register_arch_family`` does for the encoder-decoders),
    whose ``--init-style`` defaults to ``fairseq`` unless the method sets its own: fairseq's
    speech models (fairseq 0.10 on) were only ever built with fairseq's initialisation, never
    with the fairseq 0.8/0.9 one the translation papers' numbers come from.
    Returns ``{arch_name: arch_function}``."""
    method_defaults, normalize_before = defaults_and_placement(method_defaults, normalize_before)

    @functools.wraps(method_defaults)
    def speech_defaults(args):
        method_defaults(args)
        args.init_style = getattr(args, "init_style", "fairseq")

    return register_family(S2T_FAMILIES, S2T_ARCH_SIZES, model_name, speech_defaults, normalize_before)
