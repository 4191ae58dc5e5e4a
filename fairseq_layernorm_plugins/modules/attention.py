"""``--fused-attention``: the decoder's attention on PyTorch's ``scaled_dot_product_attention``.

fairseq 0.12's ``MultiheadAttention`` hands a call to ``F.multi_head_attention_forward``
(``scaled_dot_product_attention`` inside: flash / memory-efficient kernels on a GPU, one fused
kernel on CPU) only without an incremental state and without ``static_kv``, and computes
everything else with its own bmm / mask / softmax / bmm code:

* the decoder's encoder-decoder attention in training, validation and scoring: the decoder
  layer always passes ``static_kv=True``, a flag that only decides whether cached keys and
  values are reused, which needs an incremental state. Without one it changes the code path
  and nothing else, so :class:`FusedAttention` drops it;
* every step of incremental decoding (``fairseq-generate``, ``--eval-bleu``), self- and
  encoder-decoder attention: :class:`FusedAttention` runs the step itself, keeping fairseq's
  cache (the same ``prev_key`` / ``prev_value`` / ``prev_key_padding_mask`` entries and
  layout, so that fairseq's beam reordering works unchanged) and its beamable encoder-decoder
  attention (one copy of each source's keys for all its beams, ``set_beam_size``).

Calls that need what only fairseq's own path gives (attention weights, as the alignment layer
returns them; scores before the softmax; ``add_bias_kv`` / ``add_zero_attn``) stay on it.
"""

import copy

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor


class FusedAttention(MultiheadAttention):
    """fairseq's multi-head attention, on PyTorch's fused path wherever fairseq's own path
    would compute nothing else; the same parameters, names, initialisation and cache.

    Input query (T, B, C), key and value (S, B, C_kv) (self-attention: ``query`` alone),
    ``key_padding_mask`` (B, S), ``attn_mask`` (T, S) additive; output (T, B, C) and, with
    ``need_weights``, weights averaged over heads (B, T, S)."""

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
        fairseqs_own = (
            before_softmax
            or need_head_weights
            or self.bias_k is not None
            or self.add_zero_attn
            or not (self.self_attention or self.encoder_decoder_attention)  # cross-self-attention
        )
        if incremental_state is None and not fairseqs_own:
            static_kv = False  # nothing is cached without an incremental state: same result, fused path
        elif incremental_state is not None and not (fairseqs_own or need_weights or self.onnx_trace):
            return self._fused_step(query, key, key_padding_mask, incremental_state, static_kv, attn_mask), None
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

    def _heads(self, x: Tensor) -> Tensor:
        """(S, B, C) -> (B, H, S, C / H), fairseq's cache layout."""
        return x.view(x.size(0), x.size(1), self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def _fused_step(self, query, key, key_padding_mask, incremental_state, static_kv, attn_mask):
        """One incremental-decoding call as fairseq computes it (its cache entries, beamable
        encoder-decoder attention, padding masks), the attention itself in one fused call."""
        tgt_len, bsz, embed_dim = query.shape
        saved = self._get_input_buffer(incremental_state)
        q = self._heads(self.q_proj(query))  # (B, H, T, D); the kernel scales by D^-0.5 as fairseq does
        if static_kv and "prev_key" in saved:  # encoder-decoder attention after its first step
            k, v = saved["prev_key"], saved["prev_value"]
        else:
            if self.self_attention:
                key = query
            elif self.beam_size > 1 and bsz == key.size(1):  # one copy of each source for all its beams
                key = key[:, :: self.beam_size]
                if key_padding_mask is not None:
                    key_padding_mask = key_padding_mask[:: self.beam_size]
            k, v = self._heads(self.k_proj(key)), self._heads(self.v_proj(key))
            if "prev_key" in saved:  # self-attention: the earlier steps' keys and values first
                k, v = torch.cat([saved["prev_key"], k], dim=2), torch.cat([saved["prev_value"], v], dim=2)
        key_padding_mask = self._append_prev_key_padding_mask(
            key_padding_mask=key_padding_mask,
            prev_key_padding_mask=saved.get("prev_key_padding_mask"),
            batch_size=k.size(0),
            src_len=k.size(2),
            static_kv=static_kv,
        )
        saved["prev_key"], saved["prev_value"], saved["prev_key_padding_mask"] = k, v, key_padding_mask
        self._set_input_buffer(incremental_state, saved)

        kv_bsz, src_len = k.size(0), k.size(2)
        beams = bsz // kv_bsz  # queries sharing one copy of the keys: fold them into the query length
        q = q.reshape(kv_bsz, beams, self.num_heads, tgt_len, self.head_dim).transpose(1, 2)
        q = q.reshape(kv_bsz, self.num_heads, beams * tgt_len, self.head_dim)
        mask = None
        if key_padding_mask is not None and key_padding_mask.dim() > 0:
            mask = ~key_padding_mask.to(torch.bool).view(kv_bsz, 1, 1, src_len)  # True: attend
        if attn_mask is not None:  # additive (T, S); self-attention only, where beams == 1
            additive = attn_mask.to(q.dtype).view(1, 1, tgt_len, src_len)
            mask = additive if mask is None else additive.masked_fill(~mask, float("-inf"))
        dropout = self.dropout_module.p if self.training or self.dropout_module.apply_during_inference else 0.0
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        attn = attn.view(kv_bsz, self.num_heads, beams, tgt_len, self.head_dim).permute(3, 0, 2, 1, 4)
        return self.out_proj(attn.reshape(tgt_len, bsz, embed_dim))


class FusedAttentionMixin:
    """Mix in before fairseq's decoder layer: with ``cfg.fused_attention`` its self- and
    encoder-decoder attention are :class:`FusedAttention` (the same parameters, names and
    initialisation as fairseq's)."""

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        if not getattr(cfg, "fused_attention", False):
            return super().build_self_attention(embed_dim, cfg, add_bias_kv, add_zero_attn)
        return FusedAttention(
            embed_dim,
            cfg.decoder.attention_heads,
            dropout=cfg.attention_dropout,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
            self_attention=not cfg.cross_self_attention,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            xformers_att_config=cfg.decoder.xformers_att_config,
        )

    def build_encoder_attention(self, embed_dim, cfg):
        if not getattr(cfg, "fused_attention", False):
            return super().build_encoder_attention(embed_dim, cfg)
        return FusedAttention(
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
