"""Registered models: one module per method over :mod:`.base`."""

from fairseq_layernorm_plugins.models import (  # noqa: F401
    transformer_admin,
    transformer_b2t,
    transformer_deepnet,
    transformer_dlcl,
    transformer_dyt,
    transformer_lns,
    transformer_mixln,
    transformer_periln,
    transformer_postln,
    transformer_preln,
    transformer_residual,
    transformer_rezero,
    transformer_subln,
    transformer_tfixup,
)
from fairseq_layernorm_plugins.models.base import ARCH_SIZES, PluginTransformerModel

__all__ = ["ARCH_SIZES", "PluginTransformerModel"]
