"""Mix-LN (Li et al. 2024) as fairseq models: ``transformer_mixln``,
``transformer_lm_mixln`` and ``s2t_transformer_mixln``, whose layers mix in the core's
:class:`~layernorm_methods.methods.mixln.MixLNLayerMixin` (the rule, and its warning where it
leaves no Post-LN layer, are described there). Option: ``--mixln-post-layers K`` (default
floor(0.25 L) per stack).
"""

from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer
from layernorm_methods.methods.mixln import METHOD as CORE
from layernorm_methods.methods.mixln import MixLNLayerMixin


class MixLNEncoderLayer(MixLNLayerMixin, PluginEncoderLayer):
    """Mix-LN's encoder layer (Post-LN or Pre-LN by its place in the stack)."""


class MixLNDecoderLayer(MixLNLayerMixin, PluginDecoderLayer):
    """Mix-LN's decoder layer (Post-LN or Pre-LN by its place in the stack)."""


class MixLNModel:
    """What Mix-LN adds to a model of any kind: its option."""

    @staticmethod
    def add_method_args(parser):
        parser.add_argument(
            "--mixln-post-layers",
            type=int,
            metavar="K",
            help="Post-LN layers at the bottom of each stack (default: floor(0.25 L), Li et al. 2024)",
        )


@register_model("transformer_mixln")
class TransformerMixLNModel(MixLNModel, PluginTransformerModel):
    """Mix-LN encoder-decoder Transformer."""

    encoder_layer_cls = MixLNEncoderLayer
    decoder_layer_cls = MixLNDecoderLayer


@register_model("transformer_lm_mixln")
class TransformerMixLNLanguageModel(MixLNModel, PluginTransformerLanguageModel):
    """Mix-LN decoder-only language model."""

    decoder_layer_cls = MixLNDecoderLayer


@register_model("s2t_transformer_mixln")
class S2TMixLNModel(MixLNModel, PluginS2TTransformerModel):
    """Mix-LN speech-to-text Transformer."""

    encoder_layer_cls = MixLNEncoderLayer
    decoder_layer_cls = MixLNDecoderLayer


ARCHS = register_arch_family("transformer_mixln", CORE)
LM_ARCHS = register_lm_arch_family("transformer_lm_mixln", CORE)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_mixln", CORE)
METHOD = register_method(
    "mixln",
    "transformer_mixln",
    "Mix-LN",
    "Li et al. 2024",
    order=7,
    lm_model="transformer_lm_mixln",
    s2t_model="s2t_transformer_mixln",
)
