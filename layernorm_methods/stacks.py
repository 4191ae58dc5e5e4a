"""Encoder and decoder stacks over a method's layer class, fairseq's ``TransformerEncoderBase``
and ``TransformerDecoderBase`` in plain PyTorch: scaled token embeddings plus fairseq's
sinusoidal positions, dropout, the layers, the final LayerNorm of a Pre-LN stack, and (the
decoder) the output projection; the same sub-module names, so fairseq's weights load as they
are (``transfer.py``)."""

from __future__ import annotations  # `X | None` annotations on Python 3.9

import math

import torch
from torch import Tensor, nn

from layernorm_methods.layers import Stack
from layernorm_methods.norms import STACK_NORM_NAMES, norm_type_


def embedding(num_embeddings, embedding_dim, padding_idx):
    """fairseq's ``Embedding``: N(0, d^-1/2), the padding row zero (``padding_idx`` None: no
    padding token)."""
    table = nn.Embedding(num_embeddings, embedding_dim, padding_idx=padding_idx)
    nn.init.normal_(table.weight, mean=0, std=embedding_dim**-0.5)
    if padding_idx is not None:
        nn.init.constant_(table.weight[padding_idx], 0)
    return table


class SinusoidalPositions(nn.Module):
    """fairseq's ``SinusoidalPositionalEmbedding``: position t (from 1) of a non-padding token
    takes row ``padding_idx + t`` of [sin | cos] at frequencies 10000^(-i / (d/2 - 1)), padding
    takes the zero row ``padding_idx``; computed in float32 as fairseq does, then cast. With
    ``padding_idx`` None (no padding token) position t takes row t.

    Input tokens (B, T); output (B, T, C)."""

    def __init__(self, embedding_dim, padding_idx):
        super().__init__()
        self.embedding_dim, self.padding_idx = embedding_dim, padding_idx

    def table(self, num_embeddings, device):
        half = self.embedding_dim // 2
        freq = torch.exp(torch.arange(half, dtype=torch.float, device=device) * -(math.log(10000) / (half - 1)))
        angles = torch.arange(num_embeddings, dtype=torch.float, device=device).unsqueeze(1) * freq.unsqueeze(0)
        table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
        if self.embedding_dim % 2:
            table = torch.cat([table, table.new_zeros(num_embeddings, 1)], dim=1)
        if self.padding_idx is not None:
            table[self.padding_idx] = 0
        return table

    def forward(self, tokens: Tensor, dtype) -> Tensor:
        offset = 0 if self.padding_idx is None else self.padding_idx
        keep = torch.ones_like(tokens, dtype=torch.int) if self.padding_idx is None else tokens.ne(offset).int()
        positions = (torch.cumsum(keep, dim=1) * keep).long() + offset
        table = self.table(offset + tokens.size(1) + 1, tokens.device)
        return table[positions].to(dtype)


class EmbeddedStack(nn.Module):
    """What the encoder and the decoder share: their input embedding and final LayerNorm."""

    kind: str

    def __init__(self, cfg, side, embed_tokens, layers, final_norm):
        super().__init__()
        self.dropout_module = nn.Dropout(cfg.dropout)
        self.embed_tokens = embed_tokens
        self.padding_idx = embed_tokens.padding_idx
        self.embed_scale = 1.0 if cfg.no_scale_embedding else math.sqrt(side.embed_dim)
        self.embed_positions = SinusoidalPositions(side.embed_dim, self.padding_idx)
        self.layernorm_embedding = nn.LayerNorm(side.embed_dim) if cfg.layernorm_embedding else None
        self.layers = nn.ModuleList(layers)
        self.layer_norm = nn.LayerNorm(side.embed_dim) if final_norm else None
        norm_type_(self, cfg, STACK_NORM_NAMES)

    def embed(self, tokens: Tensor) -> Tensor:
        """(B, T) tokens -> (T, B, C): scaled embedding + positions, then dropout."""
        x = self.embed_scale * self.embed_tokens(tokens)
        x = x + self.embed_positions(tokens, x.dtype)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        return self.dropout_module(x).transpose(0, 1)

    def padding_mask(self, tokens: Tensor) -> Tensor | None:
        """(B, T) True at padding tokens; None without a padding token."""
        return None if self.padding_idx is None else tokens.eq(self.padding_idx)

    def finish(self, x: Tensor) -> Tensor:
        return x if self.layer_norm is None else self.layer_norm(x)


class Encoder(EmbeddedStack):
    """``cfg.encoder.layers`` layers of ``layer_cls``.

    Input ``src_tokens`` (B, S); output ``(x (S, B, C), padding mask (B, S) or None)``."""

    def __init__(self, cfg, embed_tokens, layer_cls):
        stack = Stack.of(cfg, "encoder")
        layers = [layer_cls(cfg, stack=stack) for _ in range(stack.num_layers)]
        super().__init__(cfg, cfg.encoder, embed_tokens, layers, cfg.encoder.normalize_before)
        layer_cls.init_stack_(self, cfg, stack)

    def forward(self, src_tokens: Tensor) -> tuple[Tensor, Tensor | None]:
        padding_mask = self.padding_mask(src_tokens)
        x = self.embed(src_tokens)
        if padding_mask is None or not padding_mask.any():
            padding_mask = None
        else:  # fairseq zeroes the padded positions' inputs
            x = x * (1 - padding_mask.t().unsqueeze(-1).type_as(x))
        return self.finish(self.run_layers(x, padding_mask)), padding_mask

    def run_layers(self, x: Tensor, padding_mask: Tensor | None) -> Tensor:
        """The layers in turn, (S, B, C) -> (S, B, C); a method with its own loop overrides it (DLCL)."""
        for layer in self.layers:
            x = layer(x, encoder_padding_mask=padding_mask)
        return x


class Decoder(EmbeddedStack):
    """``cfg.decoder.layers`` layers of ``layer_cls``; ``kind`` ``decoder`` (with encoder
    attention) or ``lm`` (a decoder-only model, without); the output projection is the input
    embedding with ``share_decoder_input_output_embed``.

    Input ``prev_output_tokens`` (B, T), encoder output (S, B, C) and its padding mask (B, S);
    output logits (B, T, V)."""

    def __init__(self, cfg, embed_tokens, layer_cls, kind="decoder"):
        stack = Stack.of(cfg, kind)
        no_encoder_attn = kind == "lm"
        layers = [layer_cls(cfg, no_encoder_attn=no_encoder_attn, stack=stack) for _ in range(stack.num_layers)]
        final_norm = cfg.decoder.normalize_before and not cfg.no_decoder_final_norm
        super().__init__(cfg, cfg.decoder, embed_tokens, layers, final_norm)
        vocab, dim = embed_tokens.weight.shape
        self.output_projection = nn.Linear(dim, vocab, bias=False)
        if cfg.share_decoder_input_output_embed or cfg.share_all_embeddings:
            self.output_projection.weight = embed_tokens.weight
        else:
            nn.init.normal_(self.output_projection.weight, mean=0, std=dim**-0.5)
        layer_cls.init_stack_(self, cfg, stack)

    def forward(
        self, prev_output_tokens: Tensor, encoder_out: Tensor | None = None, encoder_padding_mask: Tensor | None = None
    ) -> Tensor:
        padding_mask = self.padding_mask(prev_output_tokens)
        padding_mask = padding_mask if padding_mask is not None and padding_mask.any() else None
        x = self.run_layers(self.embed(prev_output_tokens), encoder_out, encoder_padding_mask, padding_mask)
        return self.output_projection(self.finish(x).transpose(0, 1))

    def run_layers(
        self,
        x: Tensor,
        encoder_out: Tensor | None,
        encoder_padding_mask: Tensor | None,
        self_attn_padding_mask: Tensor | None,
    ) -> Tensor:
        """The layers in turn, (T, B, C) -> (T, B, C); a method with its own loop overrides it (DLCL)."""
        for layer in self.layers:
            x = layer(x, encoder_out, encoder_padding_mask, self_attn_padding_mask=self_attn_padding_mask)
        return x
