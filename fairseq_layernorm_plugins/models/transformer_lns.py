"""LayerNorm Scaling (Sun et al. 2025) as fairseq models: ``transformer_lns``,
``transformer_lm_lns`` and ``s2t_transformer_lns``, whose layers mix in the core's
:class:`~layernorm_methods.methods.lns.LNSLayerMixin` (the rule is described there): Pre-LN
with layer l's norms scaled by 1/sqrt(l).
"""

from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer
from layernorm_methods.methods.lns import METHOD as CORE
from layernorm_methods.methods.lns import LNSLayerMixin


class LNSEncoderLayer(LNSLayerMixin, PluginEncoderLayer):
    """LayerNorm Scaling's encoder layer."""


class LNSDecoderLayer(LNSLayerMixin, PluginDecoderLayer):
    """LayerNorm Scaling's decoder layer."""


@register_model("transformer_lns")
class TransformerLNSModel(PluginTransformerModel):
    """Pre-LN encoder-decoder Transformer with LayerNorm Scaling."""

    encoder_layer_cls = LNSEncoderLayer
    decoder_layer_cls = LNSDecoderLayer


@register_model("transformer_lm_lns")
class TransformerLNSLanguageModel(PluginTransformerLanguageModel):
    """Pre-LN decoder-only language model with LayerNorm Scaling."""

    decoder_layer_cls = LNSDecoderLayer


@register_model("s2t_transformer_lns")
class S2TLNSModel(PluginS2TTransformerModel):
    """Pre-LN speech-to-text Transformer with LayerNorm Scaling."""

    encoder_layer_cls = LNSEncoderLayer
    decoder_layer_cls = LNSDecoderLayer


ARCHS = register_arch_family("transformer_lns", CORE)
LM_ARCHS = register_lm_arch_family("transformer_lm_lns", CORE)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_lns", CORE)
METHOD = register_method(
    "lns",
    "transformer_lns",
    "LayerNorm Scaling",
    "Sun et al. 2025",
    order=8,
    lm_model="transformer_lm_lns",
    s2t_model="s2t_transformer_lns",
)
