"""ReZero (Bachlechner et al. 2020) as fairseq models: ``transformer_rezero``,
``transformer_lm_rezero`` and ``s2t_transformer_rezero``, whose layers mix in the core's
:class:`~layernorm_methods.methods.rezero.ReZeroLayerMixin` (the formula is described there):
x + alpha f(x), alpha = 0 at first, no LayerNorm anywhere (fairseq's LayerNorm flags refused).
"""

from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.models.family import NORM_PLACEMENT
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer
from layernorm_methods.methods.rezero import METHOD as CORE
from layernorm_methods.methods.rezero import NO_LAYER_NORM, ReZeroLayerMixin


class ReZeroEncoderLayer(ReZeroLayerMixin, PluginEncoderLayer):
    """ReZero's encoder layer."""


class ReZeroDecoderLayer(ReZeroLayerMixin, PluginDecoderLayer):
    """ReZero's decoder layer."""


NO_NORM = {**dict.fromkeys(NORM_PLACEMENT, NO_LAYER_NORM["layernorm_embedding"]), **NO_LAYER_NORM}


@register_model("transformer_rezero")
class TransformerReZeroModel(PluginTransformerModel):
    """Normalisation-free encoder-decoder Transformer with ReZero residuals."""

    encoder_layer_cls = ReZeroEncoderLayer
    decoder_layer_cls = ReZeroDecoderLayer
    incompatible_flags = NO_NORM


@register_model("transformer_lm_rezero")
class TransformerReZeroLanguageModel(PluginTransformerLanguageModel):
    """Normalisation-free decoder-only language model with ReZero residuals."""

    decoder_layer_cls = ReZeroDecoderLayer
    incompatible_flags = NO_NORM


@register_model("s2t_transformer_rezero")
class S2TReZeroModel(PluginS2TTransformerModel):
    """Normalisation-free speech-to-text Transformer with ReZero residuals."""

    encoder_layer_cls = ReZeroEncoderLayer
    decoder_layer_cls = ReZeroDecoderLayer
    incompatible_flags = NO_NORM


ARCHS = register_arch_family("transformer_rezero", CORE)
LM_ARCHS = register_lm_arch_family("transformer_lm_rezero", CORE)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_rezero", CORE)
METHOD = register_method(
    "rezero",
    "transformer_rezero",
    "ReZero",
    "Bachlechner et al. 2020",
    order=9,
    lm_model="transformer_lm_rezero",
    s2t_model="s2t_transformer_rezero",
)
