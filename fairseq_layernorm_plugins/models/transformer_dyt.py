"""DyT (Zhu et al. 2025, "Transformers without Normalization"): a Pre-LN Transformer with
every LayerNorm, the stacks' final ones included, replaced by Dynamic Tanh,

    DyT(x) = gamma * tanh(alpha x) + beta,    x_i = x_{i-1} + f_i(DyT(x_{i-1})),

alpha one learnable scalar per DyT layer starting at ``--dyt-alpha-init`` (the paper's
default 0.5; its LLaMA models start the attention, FFN and final ones apart, e.g. 0.8 / 0.2 /
0.2 at 7B), gamma ones, beta zeros (jiachenzhu/DyT ``convert_ln_to_dyt``). Everything else is
initialised as ``--init-style`` says.
"""

from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer
from layernorm_methods.norms import (
    LAYER_NORM_NAMES,
    STACK_NORM_NAMES,
    DynamicTanh,
    norm_dim,
    replace_norms_,
)

DYT_ALPHA_INIT = 0.5  # Zhu et al. 2025 and jiachenzhu/DyT: the default outside their LLaMA models


def dyt(cfg):
    """A function making the DyT layer that replaces a given normalisation layer."""
    alpha = getattr(cfg, "dyt_alpha_init", None)
    return lambda norm: DynamicTanh(norm_dim(norm), DYT_ALPHA_INIT if alpha is None else alpha)


class DyTLayerMixin:
    """Every LayerNorm of the layer, and the stack's final one, a :class:`DynamicTanh`."""

    def method_init_(self, cfg, stack):
        super().method_init_(cfg, stack)
        replace_norms_(self, LAYER_NORM_NAMES, dyt(cfg))

    @classmethod
    def init_stack_(cls, stack_module, cfg, stack):
        super().init_stack_(stack_module, cfg, stack)
        replace_norms_(stack_module, STACK_NORM_NAMES, dyt(cfg))


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


def dyt_defaults(args):
    """DyT (Zhu et al. 2025): Pre-LN with every LayerNorm a Dynamic Tanh."""
    args.dyt_alpha_init = getattr(args, "dyt_alpha_init", None)


ARCHS = register_arch_family("transformer_dyt", dyt_defaults, normalize_before=True)
LM_ARCHS = register_lm_arch_family("transformer_lm_dyt", dyt_defaults, normalize_before=True)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_dyt", dyt_defaults, normalize_before=True)
METHOD = register_method(
    "dyt",
    "transformer_dyt",
    "DyT",
    "Zhu et al. 2025",
    order=10,
    lm_model="transformer_lm_dyt",
    s2t_model="s2t_transformer_dyt",
)
