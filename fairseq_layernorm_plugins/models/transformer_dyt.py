"""DyT (Zhu et al. 2025) as fairseq models: ``transformer_dyt``, ``transformer_lm_dyt``
and ``s2t_transformer_dyt``, whose layers mix in the core's
:class:`~layernorm_methods.methods.dyt.DyTLayerMixin` (the formula is described there): Pre-LN
with every LayerNorm, the final ones included, a Dynamic Tanh. Option: ``--dyt-alpha-init``
(default 0.5).
"""

from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer
from layernorm_methods.methods.dyt import METHOD as CORE
from layernorm_methods.methods.dyt import DyTLayerMixin


class DyTEncoderLayer(DyTLayerMixin, PluginEncoderLayer):
    """DyT's encoder layer."""


class DyTDecoderLayer(DyTLayerMixin, PluginDecoderLayer):
    """DyT's decoder layer."""


class DyTModel:
    """What DyT adds to a model of any kind: its option."""

    @staticmethod
    def add_method_args(parser):
        parser.add_argument(
            "--dyt-alpha-init",
            type=float,
            help="alpha of every DyT layer at initialisation (default 0.5, Zhu et al. 2025)",
        )


@register_model("transformer_dyt")
class TransformerDyTModel(DyTModel, PluginTransformerModel):
    """Encoder-decoder Transformer with Dynamic Tanh in place of every LayerNorm."""

    encoder_layer_cls = DyTEncoderLayer
    decoder_layer_cls = DyTDecoderLayer


@register_model("transformer_lm_dyt")
class TransformerDyTLanguageModel(DyTModel, PluginTransformerLanguageModel):
    """Decoder-only language model with Dynamic Tanh in place of every LayerNorm."""

    decoder_layer_cls = DyTDecoderLayer


@register_model("s2t_transformer_dyt")
class S2TDyTModel(DyTModel, PluginS2TTransformerModel):
    """Speech-to-text Transformer with Dynamic Tanh in place of every LayerNorm."""

    encoder_layer_cls = DyTEncoderLayer
    decoder_layer_cls = DyTDecoderLayer


ARCHS = register_arch_family("transformer_dyt", CORE)
LM_ARCHS = register_lm_arch_family("transformer_lm_dyt", CORE)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_dyt", CORE)
METHOD = register_method(
    "dyt",
    "transformer_dyt",
    "DyT",
    "Zhu et al. 2025",
    order=10,
    lm_model="transformer_lm_dyt",
    s2t_model="s2t_transformer_dyt",
)
