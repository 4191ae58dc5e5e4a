"""Whole models of any method: an encoder-decoder and a decoder-only language model, built
from a method's name and the model's sizes (``configure``), computing what the fairseq plugin's
``transformer_<method>`` and ``transformer_lm_<method>`` compute for the same weights."""

from dataclasses import fields
from types import SimpleNamespace

from torch import Tensor, nn

from layernorm_methods.config import StackConfig, TransformerConfig
from layernorm_methods.registry import get
from layernorm_methods.stacks import embedding

SIZES = ("embed_dim", "ffn_embed_dim", "attention_heads")
SETTINGS = tuple(f.name for f in fields(TransformerConfig) if f.name not in ("encoder", "decoder"))


def configure(
    method, encoder_layers=6, decoder_layers=6, embed_dim=512, ffn_embed_dim=2048, attention_heads=8, **given
):
    """The :class:`TransformerConfig` of ``method`` (a name): the sizes, any setting of
    :class:`TransformerConfig` (``dropout``, ``init_style``, ...) and the method's own options
    (``b2t_no_layer_norm``, ``deepnet_init``, ...) as given, the rest at the method's defaults
    (its authors' ``init_style`` included), its LayerNorm placement in both stacks.
    ValueError naming an option that is neither."""
    chosen = get(method)
    unknown = sorted(set(given) - set(SETTINGS) - set(chosen.options))
    if unknown:
        raise ValueError(
            f"{method}: unknown option(s) {unknown}; settings: {', '.join(SETTINGS)}; "
            f"the method's: {', '.join(chosen.options) or 'none'}"
        )
    for name, why in chosen.refuses.items():
        if given.get(name):
            raise ValueError(f"{method}: drop {name} ({why})")
    args = SimpleNamespace(**given)
    chosen.defaults(args)  # as the method's fairseq architectures: given values win
    sizes = dict(embed_dim=embed_dim, ffn_embed_dim=ffn_embed_dim, attention_heads=attention_heads)
    place = bool(chosen.normalize_before)
    cfg = TransformerConfig(
        encoder=StackConfig(layers=encoder_layers, normalize_before=place, **sizes),
        decoder=StackConfig(layers=decoder_layers, normalize_before=place, **sizes),
        **{name: value for name, value in vars(args).items() if name in SETTINGS},
    )
    for name in chosen.options:
        setattr(cfg, name, getattr(args, name))
    cfg.method = method
    return cfg


class EncoderDecoderModel(nn.Module):
    """A translation model of ``cfg.method``: tokens in, logits out. ``padding_idx``: the
    padding token (fairseq's dictionaries: 1; a fairseq model's weights need its own), masked
    out of attention and positions; None when no token is padding.

    Input ``src_tokens`` (B, S), ``prev_output_tokens`` (B, T); output logits (B, T, V_tgt)."""

    def __init__(self, cfg, src_vocab, tgt_vocab=None, padding_idx=1):
        super().__init__()
        method = get(cfg.method)
        src_embed = embedding(src_vocab, cfg.encoder.embed_dim, padding_idx)
        if cfg.share_all_embeddings:
            if tgt_vocab not in (None, src_vocab):
                raise ValueError("share_all_embeddings needs one vocabulary for source and target")
            tgt_embed = src_embed
        else:
            tgt_embed = embedding(tgt_vocab or src_vocab, cfg.decoder.embed_dim, padding_idx)
        self.cfg = cfg
        self.encoder = method.encoder_cls(cfg, src_embed, method.encoder_layer)
        self.decoder = method.decoder_cls(cfg, tgt_embed, method.decoder_layer)

    def forward(self, src_tokens: Tensor, prev_output_tokens: Tensor) -> Tensor:
        encoder_out, padding_mask = self.encoder(src_tokens)
        return self.decoder(prev_output_tokens, encoder_out, padding_mask)


class LanguageModel(nn.Module):
    """A decoder-only language model of ``cfg.method`` (``cfg.decoder``'s sizes);
    ``padding_idx`` as :class:`EncoderDecoderModel` takes it (None: no token is padding).

    Input tokens (B, T); output next-token logits (B, T, V)."""

    def __init__(self, cfg, vocab, padding_idx=1):
        super().__init__()
        method = get(cfg.method)
        self.cfg = cfg
        self.decoder = method.decoder_cls(
            cfg, embedding(vocab, cfg.decoder.embed_dim, padding_idx), method.decoder_layer, kind="lm"
        )

    def forward(self, tokens: Tensor) -> Tensor:
        return self.decoder(tokens)


def build_model(method, src_vocab, tgt_vocab=None, padding_idx=1, **settings):
    """An :class:`EncoderDecoderModel` of ``method``; ``settings`` as :func:`configure` takes them."""
    return EncoderDecoderModel(configure(method, **settings), src_vocab, tgt_vocab, padding_idx)


def build_language_model(method, vocab, layers=6, padding_idx=1, **settings):
    """A :class:`LanguageModel` of ``method`` with ``layers`` layers; ``settings`` as :func:`configure`."""
    return LanguageModel(configure(method, encoder_layers=0, decoder_layers=layers, **settings), vocab, padding_idx)
