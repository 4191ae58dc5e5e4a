"""LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth in Large Language Models"):
Pre-LN with every normalisation of layer l (counted from 1 in each stack) scaled by
1/sqrt(l),

    x_i = x_{i-1} + f_i(LN(x_{i-1}) / sqrt(l))

for each sub-layer of layer l; the stack's final LayerNorm is not scaled (the authors' code,
lmsdss/LayerNorm-Scaling: both norms of a layer share its factor, the final norm is plain).
The normalisation is whatever ``--norm-type`` makes it (the paper's LLaMA models: RMSNorm).
"""

from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer, stack_layers
from layernorm_methods.norms import LAYER_NORM_NAMES, ScaledNorm, replace_norms_


def lns_scale(layer_number):
    """1/sqrt(l) for layer l = 1, 2, ... of a stack (Sun et al. 2025; lmsdss/LayerNorm-Scaling)."""
    return layer_number**-0.5


class LNSLayerMixin:
    """Each layer's norms get their factor per stack, once its index is known (``init_stack_``)."""

    @classmethod
    def init_stack_(cls, stack_module, cfg, stack):
        super().init_stack_(stack_module, cfg, stack)
        for index, layer in enumerate(stack_layers(stack_module)):
            replace_norms_(layer, LAYER_NORM_NAMES, lambda norm, n=index + 1: ScaledNorm(norm, lns_scale(n)))


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


def lns_defaults(args):
    """LayerNorm Scaling (Sun et al. 2025): Pre-LN, layer l's norms scaled by 1/sqrt(l)."""


ARCHS = register_arch_family("transformer_lns", lns_defaults, normalize_before=True)
LM_ARCHS = register_lm_arch_family("transformer_lm_lns", lns_defaults, normalize_before=True)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_lns", lns_defaults, normalize_before=True)
METHOD = register_method(
    "lns",
    "transformer_lns",
    "LayerNorm Scaling",
    "Sun et al. 2025",
    order=8,
    lm_model="transformer_lm_lns",
    s2t_model="s2t_transformer_lns",
)
