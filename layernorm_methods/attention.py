"""Multi-head attention on torch's ``F.scaled_dot_product_attention``, with fairseq's parameter
names and initialisation (``k_proj``, ``v_proj``, ``q_proj``, ``out_proj``; q/k/v Xavier-uniform
at gain 1/sqrt(2) when their widths agree, ``out_proj`` Xavier-uniform with a zero bias), so a
fairseq model's weights load unchanged."""

from __future__ import annotations  # `X | None` annotations on Python 3.9

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class MultiheadAttention(nn.Module):
    """Self- or encoder-decoder attention.

    Input query (T, B, C), key and value (S, B, C_kv), ``key_padding_mask`` (B, S) True at
    padding, ``attn_mask`` (T, S) additive (-inf where not attended) or ``causal``; output (T, B, C)."""

    def __init__(self, embed_dim, num_heads, kdim=None, vdim=None, dropout=0.0, bias=True):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.k_proj = nn.Linear(self.kdim, embed_dim, bias=bias)  # fairseq's order: k, v, q, out
        self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.reset_parameters()

    def reset_parameters(self):
        """fairseq's ``MultiheadAttention.reset_parameters``."""
        gain = 1 / math.sqrt(2) if self.kdim == self.vdim == self.embed_dim else 1.0
        for proj in (self.k_proj, self.v_proj, self.q_proj):
            nn.init.xavier_uniform_(proj.weight, gain=gain)
        nn.init.xavier_uniform_(self.out_proj.weight)
        if self.out_proj.bias is not None:
            nn.init.constant_(self.out_proj.bias, 0.0)

    def _heads(self, x: Tensor) -> Tensor:
        """(S, B, C) -> (B, H, S, C / H)."""
        return x.view(x.size(0), x.size(1), self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        tgt_len, bsz, _ = query.shape
        q, k, v = self._heads(self.q_proj(query)), self._heads(self.k_proj(key)), self._heads(self.v_proj(value))
        mask = None
        if attn_mask is not None:
            mask = attn_mask.to(q.dtype).view(1, 1, tgt_len, -1)
        if key_padding_mask is not None:
            padded = key_padding_mask.to(torch.bool).view(bsz, 1, 1, -1)
            pad = torch.zeros(padded.shape, dtype=q.dtype, device=q.device).masked_fill(padded, float("-inf"))
            mask = pad if mask is None else mask + pad
        dropout = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal)
        return self.out_proj(out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim))
