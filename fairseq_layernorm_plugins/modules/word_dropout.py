"""Word dropout on the input embeddings, the perturbation the B2T authors' README recommends
for deep models (their ``--sampling-method worddrop --enc-replace-rate P --dec-replace-rate P``;
Takase & Kiyono 2021, "Rethinking Perturbations in Encoder-Decoders for Fast Training").

As their fork applies it (takase/b2t_connection, ``fairseq/models/transformer.py``,
``replace_input_tokens``): in training only, each token's embedding vector, before the
sqrt(d) scale and the positions are added, is zeroed with probability P, with no
rescaling of the kept ones; on the decoder side the first position (the EOS that starts
every target) is always kept. The rates keep the fork's names; a rate above 0 turns it on,
which is their ``--sampling-method worddrop`` (that option name is taken by fairseq's
``translation_multi_simple_epoch`` task, and the fork's other sampling methods and its
``--decay-val``, unused by ``worddrop``, are not offered).

:func:`install_word_dropout` swaps a built model's ``embed_tokens`` for a
:class:`WordDropoutEmbedding` holding the *same* weight parameter, so parameters,
checkpoints, shared embeddings and the tied output projection are unchanged; it works for
any fairseq encoder-decoder whose encoder and decoder call ``self.embed_tokens``.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class WordDropoutEmbedding(nn.Embedding):
    """``embedding`` (its weight parameter itself, not a copy) plus word dropout.

    Input tokens (B, T); output (B, T, C), in training with each position's vector zeroed
    with probability :attr:`p` (position 0 never when :attr:`keep_first`)."""

    def __init__(self, embedding: nn.Embedding, p: float, keep_first: bool):
        nn.Module.__init__(self)
        for name in ("num_embeddings", "embedding_dim", "padding_idx", "max_norm", "norm_type"):
            setattr(self, name, getattr(embedding, name))
        self.scale_grad_by_freq, self.sparse = embedding.scale_grad_by_freq, embedding.sparse
        self.weight = embedding.weight  # the same Parameter: shared and tied weights stay tied
        self.p = float(p)
        self.keep_first = bool(keep_first)

    def forward(self, input: Tensor) -> Tensor:
        x = F.embedding(
            input, self.weight, self.padding_idx, self.max_norm, self.norm_type, self.scale_grad_by_freq, self.sparse
        )
        if self.training and self.p > 0:
            # Takase & Kiyono 2021 word dropout: e_t * b_t, b_t ~ Bernoulli(1 - p), no rescaling
            keep = torch.full(x.shape[:2], 1.0 - self.p, dtype=x.dtype, device=x.device).bernoulli()
            if self.keep_first:
                keep[:, 0] = 1.0
            x = x * keep.unsqueeze(-1)
        return x

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, word_dropout={self.p}, keep_first={self.keep_first}"


def add_word_dropout_args(parser):
    """The fork's rates (``--enc-replace-rate``, ``--dec-replace-rate``); a rate above 0 is its
    ``--sampling-method worddrop``, a name fairseq's ``translation_multi_simple_epoch`` task
    already takes for its own option."""
    parser.add_argument(
        "--enc-replace-rate",
        type=float,
        metavar="P",
        help="encoder word dropout: zero each input token's embedding with probability P while training, as "
        "the B2T authors' fork with --sampling-method worddrop (default: 0)",
    )
    parser.add_argument(
        "--dec-replace-rate",
        type=float,
        metavar="P",
        help="decoder word dropout, the first position kept (default: 0)",
    )


def word_dropout_rates(args):
    """(encoder, decoder) word dropout probabilities the options ask for; (0, 0) when off."""
    rates = tuple(float(getattr(args, name, None) or 0.0) for name in ("enc_replace_rate", "dec_replace_rate"))
    if any(not 0.0 <= rate < 1.0 for rate in rates):
        raise ValueError(f"--enc-replace-rate / --dec-replace-rate must be in [0, 1), not {rates}")
    return rates


def install_word_dropout(model, args):
    """Give ``model``'s encoder and decoder word dropout as ``args`` asks (nothing when off);
    returns ``model``."""
    enc, dec = word_dropout_rates(args)
    if enc > 0:
        model.encoder.embed_tokens = WordDropoutEmbedding(model.encoder.embed_tokens, enc, keep_first=False)
    if dec > 0:
        model.decoder.embed_tokens = WordDropoutEmbedding(model.decoder.embed_tokens, dec, keep_first=True)
    return model
