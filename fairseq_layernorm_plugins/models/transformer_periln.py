"""Peri-LN / Sandwich-LN (Kim et al. 2025, "Peri-LN: Revisiting Layer Normalization in the
Transformer Architecture"; Ding et al. 2021, CogView): Pre-LN plus a normalisation of each
sub-layer's output before the residual sum,

    x_i = x_{i-1} + LN_out(f_i(LN_in(x_{i-1})))

in every sub-layer, with Pre-LN's final LayerNorm on top of each stack (CogView's
``third_layernorm`` / ``fourth_layernorm``; x-transformers' ``sandwich_norm``; Gemma 2's
post-attention and post-feedforward norms). The output norms start as LayerNorm does
(gamma 1, beta 0) and follow ``--norm-type``. Peri-LN's optional normalisation of the input
embedding is fairseq's own ``--layernorm-embedding`` (off by default, as in CogView).
"""

from fairseq.models import register_model
from fairseq.modules import LayerNorm
from torch import Tensor, nn

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer, SublayerResidualMixin
from layernorm_methods.norms import norm_type_

OUTPUT_NORMS = ("self_attn_out_norm", "encoder_attn_out_norm", "ffn_out_norm")


class PeriLNLayerMixin(SublayerResidualMixin):
    """x + LN_out(f): one output norm per sub-layer (self-attention, encoder attention, FFN)."""

    def method_init_(self, cfg, stack):
        super().method_init_(cfg, stack)
        self.self_attn_out_norm = LayerNorm(stack.embed_dim)
        # an encoder layer has no encoder attention: an identity keeps combine() one code path
        has_cross = self.num_sublayers == 3
        self.encoder_attn_out_norm = LayerNorm(stack.embed_dim) if has_cross else nn.Identity()
        self.ffn_out_norm = LayerNorm(stack.embed_dim)
        norm_type_(self, cfg, OUTPUT_NORMS)

    def combine(self, x: Tensor, residual: Tensor, sublayer: int) -> Tensor:
        """x: the sub-layer's branch output f(LN_in(residual)), residual: its input, both (T, B, C)."""
        if sublayer == 1:
            return residual + self.self_attn_out_norm(x)  # Kim et al. 2025: x + LN(F(LN(x)))
        if sublayer == self.num_sublayers:
            return residual + self.ffn_out_norm(x)
        return residual + self.encoder_attn_out_norm(x)


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


def periln_defaults(args):
    """Peri-LN / Sandwich-LN (Kim et al. 2025; Ding et al. 2021): x + LN(f(LN(x)))."""


ARCHS = register_arch_family("transformer_periln", periln_defaults, normalize_before=True)
LM_ARCHS = register_lm_arch_family("transformer_lm_periln", periln_defaults, normalize_before=True)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_periln", periln_defaults, normalize_before=True)
METHOD = register_method(
    "periln",
    "transformer_periln",
    "Peri-LN",
    "Kim et al. 2025",
    order=6,
    lm_model="transformer_lm_periln",
    s2t_model="s2t_transformer_periln",
)
