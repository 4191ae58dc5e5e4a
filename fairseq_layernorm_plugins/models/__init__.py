"""Registered models: one module per method over :mod:`.base`."""
from fairseq_layernorm_plugins.models import transformer_preln  # noqa: F401
from fairseq_layernorm_plugins.models.base import ARCH_SIZES, PluginTransformerModel

__all__ = ["ARCH_SIZES", "PluginTransformerModel"]
