"""Shared building blocks: encoders/decoders whose layer class a method chooses.

Methods subclass fairseq's ``TransformerEncoderLayerBase`` /
``TransformerDecoderLayerBase`` (overriding its hooks: ``residual_connection``,
``build_fc1``, ``build_self_attention``, ...) and plug them in through
:class:`PluginTransformerEncoder` / :class:`PluginTransformerDecoder`.
"""
from fairseq_layernorm_plugins.modules.residual import SublayerResidualMixin, remove_layer_norms
from fairseq_layernorm_plugins.modules.stacks import (
    PluginTransformerDecoder,
    PluginTransformerEncoder,
    stack_layers,
)

__all__ = [
    "PluginTransformerEncoder",
    "PluginTransformerDecoder",
    "SublayerResidualMixin",
    "remove_layer_norms",
    "stack_layers",
]
