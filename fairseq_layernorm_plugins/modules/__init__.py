"""Shared building blocks: encoders/decoders whose layer class a method chooses.

Methods subclass :class:`PluginEncoderLayer` / :class:`PluginDecoderLayer` (fairseq's
``TransformerEncoderLayerBase`` / ``TransformerDecoderLayerBase`` with ``--init-style`` and
the per-layer / per-stack hooks ``method_init_`` and ``init_stack_``, ``layers.py``),
override fairseq's hooks (``residual_connection``, ``build_fc1``,
``build_self_attention``, ...) and plug them in through
:class:`PluginTransformerEncoder` / :class:`PluginTransformerDecoder`.
"""

from fairseq_layernorm_plugins.modules.attention import FusedAttention, FusedAttentionMixin
from fairseq_layernorm_plugins.modules.layers import PluginDecoderLayer, PluginEncoderLayer, Stack
from fairseq_layernorm_plugins.modules.stacks import (
    PluginTransformerDecoder,
    PluginTransformerEncoder,
    stack_layers,
)
from layernorm_methods.init import INIT_STYLES, attentions, paper_init_
from layernorm_methods.residual import (
    SublayerResidualMixin,
    remove_layer_norms,
)

__all__ = [
    "FusedAttention",
    "FusedAttentionMixin",
    "INIT_STYLES",
    "PluginEncoderLayer",
    "PluginDecoderLayer",
    "Stack",
    "paper_init_",
    "attentions",
    "PluginTransformerEncoder",
    "PluginTransformerDecoder",
    "SublayerResidualMixin",
    "remove_layer_norms",
    "stack_layers",
]
