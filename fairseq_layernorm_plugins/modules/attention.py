"""``--fused-attention``: encoder-decoder attention on PyTorch's fused kernels.

fairseq 0.12's ``MultiheadAttention`` hands a call to ``F.multi_head_attention_forward``
(``scaled_dot_product_attention`` inside: flash / memory-efficient kernels on a GPU, one fused
kernel on CPU) only when ``static_kv`` is False, and computes everything else with its own
bmm / mask / softmax / bmm code. Self-attention in training already takes the fused path; the
decoder's encoder-decoder attention never does, because the decoder layer always passes
``static_kv=True``. That flag only decides whether cached keys and values are reused, which
needs an incremental state (decoding step by step); without one (training, validation,
scoring) it changes the code path and nothing else. :class:`FusedCrossAttention` drops it there.
fairseq's decoder asks its alignment layer (the last, by default) for per-head attention
weights in every pass; only fairseq's own path returns those, so that layer keeps it.
"""

import copy

from fairseq.modules import MultiheadAttention
from torch import Tensor


class FusedCrossAttention(MultiheadAttention):
    """fairseq's encoder-decoder attention; without an incremental state it runs on PyTorch's
    fused path. Calls that need what only fairseq's own path gives (per-head weights, scores
    before the softmax) and incremental decoding are fairseq's, unchanged.

    Input query (T, B, C), key and value (S, B, C_enc), ``key_padding_mask`` (B, S);
    output (T, B, C) and, with ``need_weights``, weights averaged over heads (B, T, S)."""

    def __prepare_scriptable__(self):
        """TorchScript: fairseq's own class over the same parameters (scripted, fairseq's attention
        never takes the fused path, and TorchScript cannot compile ``super()``)."""
        plain = copy.copy(self)
        plain.__class__ = MultiheadAttention
        return plain

    def forward(
        self,
        query: Tensor,
        key: Tensor | None,
        value: Tensor | None,
        key_padding_mask: Tensor | None = None,
        incremental_state: dict[str, dict[str, Tensor | None]] | None = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Tensor | None = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        if incremental_state is None and not before_softmax and not need_head_weights:
            static_kv = False  # nothing is cached without an incremental state: same result, fused path
        return super().forward(
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            incremental_state=incremental_state,
            need_weights=need_weights,
            static_kv=static_kv,
            attn_mask=attn_mask,
            before_softmax=before_softmax,
            need_head_weights=need_head_weights,
        )


class FusedAttentionMixin:
    """Mix in before fairseq's decoder layer: with ``cfg.fused_attention`` its encoder-decoder
    attention is a :class:`FusedCrossAttention` (the same parameters, names and initialisation)."""

    def build_encoder_attention(self, embed_dim, cfg):
        if not getattr(cfg, "fused_attention", False):
            return super().build_encoder_attention(embed_dim, cfg)
        return FusedCrossAttention(
            embed_dim,
            cfg.decoder.attention_heads,
            kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim,
            dropout=cfg.attention_dropout,
            encoder_decoder_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            xformers_att_config=cfg.encoder.xformers_att_config,
        )
