"""ReZero (Bachlechner et al. 2020, "ReZero is All You Need: Fast Convergence at Large
Depth"): no normalisation anywhere, and each layer's branches scaled by one learnable
scalar that starts at 0,

    x_i = x_{i-1} + alpha * f_i(x_{i-1}),   alpha = 0 at initialisation,

one alpha per layer shared by its sub-layers (the authors' code, majumderb/rezero, and
Transformer-Clinic's ``--init-type rezero``: ``rezero_weight``, IWSLT14 34.66); no final
LayerNorm. Everything else is initialised as ``--init-style`` says.
"""

import torch
from fairseq.models import register_model
from torch import Tensor, nn

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer, remove_layer_norms


class ReZeroLayerMixin:
    """x + alpha * f; ``rezero_alpha`` (1,), zero at initialisation."""

    def method_init_(self, cfg, stack):
        super().method_init_(cfg, stack)
        remove_layer_norms(self)
        self.rezero_alpha = nn.Parameter(torch.zeros(1))

    def residual_connection(self, x: Tensor, residual: Tensor) -> Tensor:
        """x: the branch output f (T, B, C), residual: the sub-layer input (T, B, C)."""
        return residual + self.rezero_alpha * x  # Bachlechner et al. 2020: x + alpha F(x)


class ReZeroEncoderLayer(ReZeroLayerMixin, PluginEncoderLayer):
    """ReZero's encoder layer."""


class ReZeroDecoderLayer(ReZeroLayerMixin, PluginDecoderLayer):
    """ReZero's decoder layer."""


NO_NORM = dict.fromkeys(
    ("encoder_normalize_before", "decoder_normalize_before", "layernorm_embedding"), "ReZero has no LayerNorm"
)


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


def rezero_defaults(args):
    """ReZero (Bachlechner et al. 2020): x + alpha f(x), alpha = 0 at first, no LayerNorm."""
    args.layernorm_embedding = getattr(args, "layernorm_embedding", False)


ARCHS = register_arch_family("transformer_rezero", rezero_defaults, normalize_before=False)
LM_ARCHS = register_lm_arch_family("transformer_lm_rezero", rezero_defaults, normalize_before=False)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_rezero", rezero_defaults, normalize_before=False)
METHOD = register_method(
    "rezero",
    "transformer_rezero",
    "ReZero",
    "Bachlechner et al. 2020",
    order=9,
    lm_model="transformer_lm_rezero",
    s2t_model="s2t_transformer_rezero",
)
