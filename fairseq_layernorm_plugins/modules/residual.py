"""Residual-branch helpers shared by the methods' layers.

fairseq's layers call ``residual_connection(x, residual)`` once per sub-layer
(encoder: self-attn, FFN; decoder: self-attn, cross-attn, FFN) with the branch
output ``x`` and the sub-layer input ``residual``, but do not say which sub-layer
it is. :class:`SublayerResidualMixin` numbers those calls within one forward pass
and keeps the layer's input, which is what per-sub-layer methods need (B2T adds the
layer input at the last sub-layer; Admin has one omega per sub-layer).
"""
import torch.nn as nn


class SublayerResidualMixin:
    """Mix in before a fairseq layer class; override :meth:`combine`.

    During ``forward``: ``self.layer_input`` is the layer's input x (T, B, C) and
    ``combine(x, residual, i)`` is called for sub-layer i = 1..``num_sublayers``.
    """

    def forward(self, x, *args, **kwargs):
        self.layer_input, self.sublayer = x, 0
        try:
            return super().forward(x, *args, **kwargs)
        finally:
            self.layer_input = None  # do not keep activations alive between calls

    @property
    def num_sublayers(self):
        return 3 if getattr(self, "encoder_attn", None) is not None else 2

    def residual_connection(self, x, residual):
        self.sublayer += 1
        return self.combine(x, residual, self.sublayer)

    def combine(self, x, residual, sublayer):
        return residual + x


def remove_layer_norms(layer):
    """Replace every LayerNorm of a fairseq layer by the identity (no parameters left,
    so nothing is unused under DDP). fairseq's post-LN forward then applies none."""
    for name in ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"):
        if getattr(layer, name, None) is not None:
            setattr(layer, name, nn.Identity())
