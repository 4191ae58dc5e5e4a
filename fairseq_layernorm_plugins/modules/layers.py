"""The layers every method builds on: fairseq's own, with the core's hooks.

A method is a mixin of the core (``layernorm_methods/methods/<name>.py``): the same class is
mixed into the core's plain-PyTorch layers and into these. :class:`PluginEncoderLayer` / :class:`PluginDecoderLayer` are fairseq's
``TransformerEncoderLayerBase`` / ``TransformerDecoderLayerBase`` (same forward, same
``residual_connection`` / ``build_fc1`` / ``build_self_attention`` hooks) that, once fairseq
has built them, apply ``--init-style`` (``layernorm_methods/init.py``) and ``--norm-type``
(``layernorm_methods/norms.py``) and then call

* ``method_init_(cfg, stack)``: the method's own per-layer set-up, given the ``Stack``
  the layer belongs to (which kind, how many layers, its width). A method overrides it in a
  mixin and calls ``super().method_init_(cfg, stack)`` first, so mixins compose;

and the stacks (``modules/stacks.py``) call, once all their layers exist,

* ``init_stack_(stack_module, cfg, stack)`` (a classmethod of the layer class): the method's
  initialisation of the whole stack (its embeddings, constants over all its layers).

So one method module serves every model kind that builds these stacks: the encoder and
decoder of a translation model, and the decoder of a decoder-only language model.
"""

from fairseq.modules.quant_noise import quant_noise
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from fairseq_layernorm_plugins.modules.attention import FusedAttentionMixin
from layernorm_methods.init import init_style_
from layernorm_methods.layers import MethodHooks, Stack
from layernorm_methods.norms import LAYER_NORM_NAMES, norm_type_


class FairseqHooks(MethodHooks):
    """The core's hooks (``layernorm_methods.layers``) with fairseq's quantisation noise."""

    def quantised(self, linear, q_noise, qn_block_size):
        return quant_noise(linear, p=q_noise, block_size=qn_block_size)


class PluginEncoderLayer(FairseqHooks, TransformerEncoderLayerBase):
    """fairseq's encoder layer with ``--init-style`` and the method's hooks.

    Input x (T, B, C), ``encoder_padding_mask`` (B, T); output (T, B, C)."""

    def __init__(self, cfg, return_fc=False, stack=None):
        super().__init__(cfg, return_fc=return_fc)
        init_style_(self, cfg)
        norm_type_(self, cfg, LAYER_NORM_NAMES)
        self.method_init_(cfg, stack or Stack.of(cfg, "encoder"))


class PluginDecoderLayer(FairseqHooks, FusedAttentionMixin, TransformerDecoderLayerBase):
    """fairseq's decoder layer with ``--init-style``, ``--fused-attention`` and the method's
    hooks; in a decoder-only model (``stack.kind == "lm"``) it has no encoder attention.

    Input x (T, B, C), encoder output (S, B, C) or None; output (T, B, C)."""

    def __init__(self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False, stack=None):
        super().__init__(cfg, no_encoder_attn, add_bias_kv, add_zero_attn)
        init_style_(self, cfg)
        norm_type_(self, cfg, LAYER_NORM_NAMES)
        self.method_init_(cfg, stack or Stack.of(cfg, "decoder"))
