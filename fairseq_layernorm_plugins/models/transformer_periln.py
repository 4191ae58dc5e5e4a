"""Peri-LN / Sandwich-LN (Kim et al. 2025; Ding et al. 2021) as fairseq models:
``transformer_periln``, ``transformer_lm_periln`` and ``s2t_transformer_periln``, whose layers
mix in the core's :class:`~layernorm_methods.methods.periln.PeriLNLayerMixin` (the formula is
described there): x + LN(f(LN(x))), Pre-LN's final LayerNorm.
"""

from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer
from layernorm_methods.methods.periln import METHOD as CORE
from layernorm_methods.methods.periln import PeriLNLayerMixin


class PeriLNEncoderLayer(PeriLNLayerMixin, PluginEncoderLayer):
    """Peri-LN's encoder layer."""


class PeriLNDecoderLayer(PeriLNLayerMixin, PluginDecoderLayer):
    """Peri-LN's decoder layer."""


@register_model("transformer_periln")
class TransformerPeriLNModel(PluginTransformerModel):
    """Peri-LN encoder-decoder Transformer."""

    encoder_layer_cls = PeriLNEncoderLayer
    decoder_layer_cls = PeriLNDecoderLayer


@register_model("transformer_lm_periln")
class TransformerPeriLNLanguageModel(PluginTransformerLanguageModel):
    """Peri-LN decoder-only language model."""

    decoder_layer_cls = PeriLNDecoderLayer


@register_model("s2t_transformer_periln")
class S2TPeriLNModel(PluginS2TTransformerModel):
    """Peri-LN speech-to-text Transformer."""

    encoder_layer_cls = PeriLNEncoderLayer
    decoder_layer_cls = PeriLNDecoderLayer


ARCHS = register_arch_family("transformer_periln", CORE)
LM_ARCHS = register_lm_arch_family("transformer_lm_periln", CORE)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_periln", CORE)
METHOD = register_method(
    "periln",
    "transformer_periln",
    "Peri-LN",
    "Kim et al. 2025",
    order=6,
    lm_model="transformer_lm_periln",
    s2t_model="s2t_transformer_periln",
)
