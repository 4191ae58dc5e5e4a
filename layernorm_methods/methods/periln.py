"""Peri-LN / Sandwich-LN (Kim et al. 2025, "Peri-LN: Revisiting Layer Normalization in the
Transformer Architecture"; Ding et al. 2021, CogView): Pre-LN plus a normalisation of each
sub-layer's output before the residual sum,

    x_i = x_{i-1} + LN_out(f_i(LN_in(x_{i-1})))

in every sub-layer, with Pre-LN's final LayerNorm on top of each stack (CogView's
``third_layernorm`` / ``fourth_layernorm``; x-transformers' ``sandwich_norm``; Gemma 2's
post-attention and post-feedforward norms). The output norms start as LayerNorm does
(gamma 1, beta 0) and follow ``norm_type``. Peri-LN's optional normalisation of the input
embedding is fairseq's own ``layernorm_embedding`` (off by default, as in CogView).
"""

from torch import Tensor, nn

from layernorm_methods.norms import norm_type_
from layernorm_methods.registry import register
from layernorm_methods.residual import SublayerResidualMixin

OUTPUT_NORMS = ("self_attn_out_norm", "encoder_attn_out_norm", "ffn_out_norm")


class PeriLNLayerMixin(SublayerResidualMixin):
    """x + LN_out(f): one output norm per sub-layer (self-attention, encoder attention, FFN)."""

    def method_init_(self, cfg, stack):
        super().method_init_(cfg, stack)
        self.self_attn_out_norm = nn.LayerNorm(stack.embed_dim)
        # an encoder layer has no encoder attention: an identity keeps combine() one code path
        has_cross = self.num_sublayers == 3
        self.encoder_attn_out_norm = nn.LayerNorm(stack.embed_dim) if has_cross else nn.Identity()
        self.ffn_out_norm = nn.LayerNorm(stack.embed_dim)
        norm_type_(self, cfg, OUTPUT_NORMS)

    def combine(self, x: Tensor, residual: Tensor, sublayer: int) -> Tensor:
        """x: the sub-layer's branch output f(LN_in(residual)), residual: its input, both (T, B, C)."""
        if sublayer == 1:
            return residual + self.self_attn_out_norm(x)  # Kim et al. 2025: x + LN(F(LN(x)))
        if sublayer == self.num_sublayers:
            return residual + self.ffn_out_norm(x)
        return residual + self.encoder_attn_out_norm(x)


def periln_defaults(args):
    """Peri-LN / Sandwich-LN (Kim et al. 2025; Ding et al. 2021): x + LN(f(LN(x)))."""


METHOD = register("periln", PeriLNLayerMixin, periln_defaults, normalize_before=True)
