"""Decoder-only language models of every method: fairseq's ``TransformerLanguageModel``
(``--task language_modeling``; the same args, adaptive input and softmax, checkpoints,
``fairseq-eval-lm`` and sampling) whose decoder layers are the method's
:attr:`~PluginTransformerLanguageModel.decoder_layer_cls`, in a stack of kind ``lm``
(``modules/layers.py``): the same method code as its encoder-decoder.

fairseq's named language-model architectures all force ``decoder_normalize_before = True``
(``base_lm_architecture``), so none of them can be Post-LN; here the method's family says
where its LayerNorms sit (``register_lm_arch_family(..., normalize_before=False)``): a Post-LN
model normalises after each residual sum and has no LayerNorm before the output.
"""

import functools

from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import transformer_lm
from fairseq.models.transformer_lm import TransformerLanguageModel, TransformerLanguageModelConfig

from fairseq_layernorm_plugins.models.base import PluginModelMixin, swapped
from fairseq_layernorm_plugins.models.family import register_family
from fairseq_layernorm_plugins.modules.stacks import PluginLanguageModelDecoder

# suffix -> fairseq's language-model arch function that fills in the size defaults
LM_ARCH_SIZES = {
    "": transformer_lm.base_lm_architecture,  # 6L, d=512, FFN 2048, 8 heads
    "_big": transformer_lm.transformer_lm_big,  # 12L, d=1024, FFN 4096, 16 heads
    # Baevski and Auli 2019's adaptive-input model: 16L, d=1024, FFN 4096, 8 heads (B2T Table 3: 6L and 16L)
    "_wiki103": transformer_lm.transformer_lm_baevski_wiki103,
    "_gpt2_small": transformer_lm.transformer_lm_gpt2_small,  # 24L, d=1024, 16 heads, GELU
}

# model name -> its ArchFamily: the language models
LM_FAMILIES = {}


class PluginTransformerLanguageModel(PluginModelMixin, TransformerLanguageModel):
    """fairseq's ``TransformerLanguageModel`` whose decoder layers are :attr:`decoder_layer_cls`.

    Input ``src_tokens`` (B, T); output logits (B, T, V)."""

    families = LM_FAMILIES
    base_size = staticmethod(transformer_lm.base_lm_architecture)
    decoder_cls = PluginLanguageModelDecoder  # the stack; DLCL names its own subclass

    @classmethod
    def add_args(cls, parser):
        gen_parser_from_dataclass(parser, TransformerLanguageModelConfig(), delete_default=True)
        cls.add_plugin_args(parser)
        cls.add_method_args(parser)

    @classmethod
    def build_model(cls, args, task):
        args = cls.plugin_args(args)
        # fairseq builds its decoder as transformer_lm.TransformerDecoder(args, dictionary, embed_tokens, ...)
        with swapped(
            transformer_lm, TransformerDecoder=functools.partial(cls.decoder_cls, layer_cls=cls.decoder_layer_cls)
        ):
            model = super().build_model(args, task)
        model.args = args  # as fairseq's TransformerModel keeps them
        return model


def register_lm_arch_family(model_name, method_defaults, normalize_before=None):
    """Register ``model_name`` + each suffix of :data:`LM_ARCH_SIZES` as language-model
    architectures of the method (as ``register_arch_family`` does for the encoder-decoders).
    Returns ``{arch_name: arch_function}``."""
    return register_family(LM_FAMILIES, LM_ARCH_SIZES, model_name, method_defaults, normalize_before)
