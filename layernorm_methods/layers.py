"""The layers every method builds on, fairseq's ``TransformerEncoderLayerBase`` and
``TransformerDecoderLayerBase`` in plain PyTorch: the same sub-modules under the same names,
the same forward (dropout, residual, LayerNorm in the same order), the same hooks.

A method is a mixin over these hooks, written once (``methods/<name>.py``) and mixed into both
these layers and the fairseq plugin's (``fairseq_layernorm_plugins/modules/layers.py``):

* ``residual_connection(x, residual)``: once per sub-layer, the branch output and its input;
* ``build_fc1`` / ``build_fc2`` / ``build_self_attention`` / ``build_encoder_attention``;
* ``method_init_(cfg, stack)``: per layer, once built and ``--init-style`` applied;
* ``init_stack_(stack_module, cfg, stack)`` (a classmethod): per stack, once all its layers exist.
"""

from __future__ import annotations  # `X | None` annotations on Python 3.9

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from layernorm_methods.attention import MultiheadAttention
from layernorm_methods.init import init_style_, xavier_linear_init_
from layernorm_methods.norms import LAYER_NORM_NAMES, norm_type_

STACK_KINDS = ("encoder", "decoder", "lm")
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}  # fairseq's "gelu" is the exact (erf) one, as F.gelu


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
        """The stack of ``kind`` that ``cfg`` (a core or a fairseq ``TransformerConfig``) describes."""
        if kind not in STACK_KINDS:
            raise ValueError(f"stack kind must be one of {', '.join(STACK_KINDS)}, not {kind!r}")
        side = cfg.encoder if kind == "encoder" else cfg.decoder
        return cls(kind, side.layers, side.embed_dim)


def stack_layers(stack):
    """Every layer of an encoder or decoder, in order, for a method to set up or read
    (Mix-LN's placement, DLCL's history, Admin's omega). Indexing, not iterating: fairseq's
    ``LayerDropModuleList`` skips layers at random when iterated in training mode. A stack may
    check them first (``check_method_layers``: the fairseq stacks refuse FSDP-wrapped layers)."""
    layers = [stack.layers[i] for i in range(len(stack.layers))]
    check = getattr(stack, "check_method_layers", None)
    if check is not None:
        check(layers)
    return layers


def xavier_linear(in_features, out_features, bias=True):
    """A new fairseq 0.8/0.9 ``Linear``: Xavier-uniform weight, zero bias."""
    return xavier_linear_init_(nn.Linear(in_features, out_features, bias))


class MethodHooks:
    """The hooks a method overrides (nothing by default)."""

    def method_init_(self, cfg, stack: Stack):
        """Per layer, after the layer was built and ``init_style`` was applied."""

    @classmethod
    def init_stack_(cls, stack_module, cfg, stack: Stack):
        """Per stack, after all its layers were built: ``stack_module`` is the encoder or decoder."""

    def quantised(self, linear, q_noise, qn_block_size):
        """A linear layer a method builds, under fairseq's ``--quant-noise-pq`` (the fairseq
        layers apply it; these layers have none)."""
        if q_noise:
            raise ValueError("quantisation noise is a fairseq option: the core layers have none")
        return linear


class CoreLayer(MethodHooks, nn.Module):
    """What the encoder and decoder layers share: the FFN and the hooks fairseq gives."""

    def _build_self_attention(self, cfg, side):
        """What comes first in fairseq's order: dropout, placement, self-attention and its norm."""
        self.embed_dim, self.attention_heads = side.embed_dim, side.attention_heads
        self.dropout_module = nn.Dropout(cfg.dropout)
        if cfg.activation_fn not in ACTIVATIONS:
            raise ValueError(f"activation_fn must be one of {', '.join(ACTIVATIONS)}, not {cfg.activation_fn!r}")
        self.activation_fn = ACTIVATIONS[cfg.activation_fn]
        self.activation_dropout_module = nn.Dropout(cfg.activation_dropout)
        self.normalize_before = side.normalize_before
        self.self_attn = self.build_self_attention(self.embed_dim, cfg)
        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim)

    def _build_ffn(self, cfg, side, stack):
        """What comes last: the FFN and its norm; then ``init_style``, ``norm_type`` and the method."""
        self.fc1 = self.build_fc1(self.embed_dim, side.ffn_embed_dim, 0, 8)
        self.fc2 = self.build_fc2(side.ffn_embed_dim, self.embed_dim, 0, 8)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim)
        init_style_(self, cfg)
        norm_type_(self, cfg, LAYER_NORM_NAMES)
        self.method_init_(cfg, stack)

    def build_fc1(self, input_dim, output_dim, q_noise, qn_block_size):
        return self.quantised(nn.Linear(input_dim, output_dim), q_noise, qn_block_size)

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        return self.quantised(nn.Linear(input_dim, output_dim), q_noise, qn_block_size)

    def build_self_attention(self, embed_dim, cfg, *args, **kwargs):
        return MultiheadAttention(embed_dim, self.attention_heads, dropout=cfg.attention_dropout)

    def residual_connection(self, x, residual):
        return residual + x

    def run_sublayer(self, x: Tensor, norm, branch) -> Tensor:
        """One sub-layer as fairseq orders it: ``norm`` before ``branch`` (Pre-LN) or after the
        residual (Post-LN), dropout on the branch, the method's ``residual_connection``.
        (T, B, C) -> (T, B, C)."""
        residual = x
        if self.normalize_before:
            x = norm(x)
        x = self.residual_connection(self.dropout_module(branch(x)), residual)
        return x if self.normalize_before else norm(x)

    def ffn(self, x: Tensor) -> Tensor:
        """fc2(activation dropout(activation(fc1(x)))), (T, B, C) -> (T, B, C)."""
        return self.fc2(self.activation_dropout_module(self.activation_fn(self.fc1(x))))


class EncoderLayer(CoreLayer):
    """Self-attention and FFN, each Post-LN (``normalize_before`` False) or Pre-LN.

    Input x (T, B, C), ``encoder_padding_mask`` (B, T) True at padding or None; output (T, B, C)."""

    def __init__(self, cfg, stack=None):
        super().__init__()
        self._build_self_attention(cfg, cfg.encoder)
        self._build_ffn(cfg, cfg.encoder, stack or Stack.of(cfg, "encoder"))

    def forward(self, x: Tensor, encoder_padding_mask: Tensor | None = None) -> Tensor:
        x = self.run_sublayer(
            x, self.self_attn_layer_norm, lambda h: self.self_attn(h, h, h, key_padding_mask=encoder_padding_mask)
        )
        return self.run_sublayer(x, self.final_layer_norm, self.ffn)


class DecoderLayer(CoreLayer):
    """Causal self-attention, encoder-decoder attention (none in a decoder-only model) and FFN.

    Input x (T, B, C), ``encoder_out`` (S, B, C) or None, ``encoder_padding_mask`` (B, S),
    ``self_attn_padding_mask`` (B, T); output (T, B, C)."""

    def __init__(self, cfg, no_encoder_attn=False, stack=None):
        super().__init__()
        self._build_self_attention(cfg, cfg.decoder)
        if no_encoder_attn:
            self.encoder_attn = self.encoder_attn_layer_norm = None
        else:
            self.encoder_attn = self.build_encoder_attention(self.embed_dim, cfg)
            self.encoder_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self._build_ffn(cfg, cfg.decoder, stack or Stack.of(cfg, "lm" if no_encoder_attn else "decoder"))

    def build_encoder_attention(self, embed_dim, cfg):
        kdim = cfg.encoder.embed_dim
        return MultiheadAttention(embed_dim, cfg.decoder.attention_heads, kdim, kdim, dropout=cfg.attention_dropout)

    def forward(
        self,
        x: Tensor,
        encoder_out: Tensor | None = None,
        encoder_padding_mask: Tensor | None = None,
        self_attn_padding_mask: Tensor | None = None,
    ) -> Tensor:
        x = self.run_sublayer(
            x, self.self_attn_layer_norm, lambda h: self.causal_self_attention(h, self_attn_padding_mask)
        )
        if self.encoder_attn is not None and encoder_out is not None:
            cross = lambda h: self.encoder_attn(h, encoder_out, encoder_out, key_padding_mask=encoder_padding_mask)
            x = self.run_sublayer(x, self.encoder_attn_layer_norm, cross)
        return self.run_sublayer(x, self.final_layer_norm, self.ffn)

    def causal_self_attention(self, x: Tensor, padding_mask: Tensor | None) -> Tensor:
        """Each position attends to itself and those before it (and not to padding)."""
        if padding_mask is None:
            return self.self_attn(x, x, x, causal=True)
        return self.self_attn(x, x, x, key_padding_mask=padding_mask, attn_mask=future_mask(x))


def future_mask(x: Tensor) -> Tensor:
    """(T, T) additive: -inf above the diagonal (a position sees itself and what precedes it)."""
    t = x.size(0)
    return x.new_full((t, t), float("-inf")).triu(1)
