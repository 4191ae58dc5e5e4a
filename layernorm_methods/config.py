"""The configuration of a core model: fairseq's ``TransformerConfig`` fields that the layers
read, under the same names (``cfg.encoder.layers``, ``cfg.decoder.embed_dim``, ``cfg.dropout``,
...), so a method's hooks read a core config and a fairseq config alike.

A method's own options (``b2t_no_layer_norm``, ``deepnet_init``, ...) are attributes of the
config too, set from keyword arguments and completed by the method's defaults
(``methods/<name>.py``), as fairseq's architecture functions complete its ``args``.
"""

from dataclasses import dataclass, field


@dataclass
class StackConfig:
    """One stack: its width, FFN width, layer count, heads and LayerNorm placement."""

    embed_dim: int = 512
    ffn_embed_dim: int = 2048
    layers: int = 6
    attention_heads: int = 8
    normalize_before: bool = False


@dataclass
class TransformerConfig:
    """A model's settings (fairseq's names and defaults for its ``transformer`` and
    ``transformer_lm`` architectures: ``dropout`` 0.1, attention/activation dropout 0, the
    output projection not tied to the input embedding).

    ``share_decoder_input_output_embed``: the decoder's output projection is its input
    embedding; ``share_all_embeddings``: one embedding for source and target (one vocabulary);
    ``no_decoder_final_norm``: a Pre-LN decoder without its final LayerNorm; ``init_style``:
    ``paper`` (fairseq 0.8/0.9's FFN and q/k/v bias initialisation) or ``fairseq`` (0.12's);
    ``norm_type``: ``layernorm`` or ``rmsnorm``."""

    encoder: StackConfig = field(default_factory=StackConfig)
    decoder: StackConfig = field(default_factory=StackConfig)
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation_fn: str = "relu"
    share_decoder_input_output_embed: bool = False
    share_all_embeddings: bool = False
    no_scale_embedding: bool = False
    layernorm_embedding: bool = False
    no_decoder_final_norm: bool = False
    init_style: str = "paper"
    norm_type: str = "layernorm"
