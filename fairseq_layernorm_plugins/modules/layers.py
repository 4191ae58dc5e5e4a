"""The layers every method builds on: fairseq's own, with one hook per stack.

:class:`PluginEncoderLayer` / :class:`PluginDecoderLayer` are fairseq's
``TransformerEncoderLayerBase`` / ``TransformerDecoderLayerBase`` (same forward, same
``residual_connection`` / ``build_fc1`` / ``build_self_attention`` hooks) that, once fairseq
has built them, apply ``--init-style`` (``modules/init.py``) and ``--norm-type``
(``modules/norms.py``) and then call

* ``method_init_(cfg, stack)``: the method's own per-layer set-up, given the :class:`Stack`
  the layer belongs to (which kind, how many layers, its width). A method overrides it in a
  mixin and calls ``super().method_init_(cfg, stack)`` first, so mixins compose;

and the stacks (``modules/stacks.py``) call, once all their layers exist,

* ``init_stack_(stack_module, cfg, stack)`` (a classmethod of the layer class): the method's
  initialisation of the whole stack (its embeddings, constants over all its layers).

So one method module serves every model kind that builds these stacks: the encoder and
decoder of a translation model, and the decoder of a decoder-only language model.
"""

from dataclasses import dataclass

from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from fairseq_layernorm_plugins.modules.attention import FusedAttentionMixin
from fairseq_layernorm_plugins.modules.init import init_style_
from fairseq_layernorm_plugins.modules.norms import LAYER_NORM_NAMES, norm_type_

STACK_KINDS = ("encoder", "decoder", "lm")


@dataclass(frozen=True)
class Stack:
    """Which stack a layer is built for: ``kind`` is ``encoder`` or ``decoder`` (of an
    encoder-decoder) or ``lm`` (the decoder of a decoder-only language model); ``num_layers``
    its layer count as built; ``embed_dim`` its width."""

    kind: str
    num_layers: int
    embed_dim: int

    @classmethod
    def of(cls, cfg, kind):
        """The stack of ``kind`` that fairseq's ``cfg`` (a ``TransformerConfig``) describes."""
        if kind not in STACK_KINDS:
            raise ValueError(f"stack kind must be one of {', '.join(STACK_KINDS)}, not {kind!r}")
        side = cfg.encoder if kind == "encoder" else cfg.decoder
        return cls(kind, side.layers, side.embed_dim)


class MethodHooks:
    """The two hooks a method overrides (nothing by default)."""

    def method_init_(self, cfg, stack: Stack):
        """Per layer, after fairseq built it and ``--init-style`` was applied."""

    @classmethod
    def init_stack_(cls, stack_module, cfg, stack: Stack):
        """Per stack, after all its layers were built: ``stack_module`` is the encoder or decoder."""


class PluginEncoderLayer(MethodHooks, TransformerEncoderLayerBase):
    """fairseq's encoder layer with ``--init-style`` and the method's hooks.

    Input x (T, B, C), ``encoder_padding_mask`` (B, T); output (T, B, C)."""

    def __init__(self, cfg, return_fc=False, stack=None):
        super().__init__(cfg, return_fc=return_fc)
        init_style_(self, cfg)
        norm_type_(self, cfg, LAYER_NORM_NAMES)
        self.method_init_(cfg, stack or Stack.of(cfg, "encoder"))


class PluginDecoderLayer(MethodHooks, FusedAttentionMixin, TransformerDecoderLayerBase):
    """fairseq's decoder layer with ``--init-style``, ``--fused-attention`` and the method's
    hooks; in a decoder-only model (``stack.kind == "lm"``) it has no encoder attention.

    Input x (T, B, C), encoder output (S, B, C) or None; output (T, B, C)."""

    def __init__(self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False, stack=None):
        super().__init__(cfg, no_encoder_attn, add_bias_kv, add_zero_attn)
        init_style_(self, cfg)
        norm_type_(self, cfg, LAYER_NORM_NAMES)
        self.method_init_(cfg, stack or Stack.of(cfg, "decoder"))
