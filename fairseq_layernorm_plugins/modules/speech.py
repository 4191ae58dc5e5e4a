"""The encoder and decoder of a speech-to-text model, with a method's own layers.

fairseq's ``S2TTransformerEncoder`` builds ``args.encoder_layers`` stock
``TransformerEncoderLayer(args)`` after its convolutional subsampler, and its
``TransformerDecoderScriptable`` is the text decoder with its own ``extract_features``; these
subclasses keep everything else fairseq builds (the subsampler, the sinusoidal positions, the
final LayerNorm of a Pre-LN encoder, the CTC projection, the decoder's output projection) and
build the method's layers instead, in fairseq's order (the CTC projection of ``--ctc-weight``
after them) and with its dropout modules' names, so that with the same seed stock layers give
the stock model, parameter for parameter.
"""

import argparse

from fairseq.models.speech_to_text.s2t_transformer import S2TTransformerEncoder, TransformerDecoderScriptable
from fairseq.models.transformer import TransformerConfig
from fairseq.modules.transformer_layer import TransformerEncoderLayer
from torch import nn

from fairseq_layernorm_plugins.modules.layers import PluginEncoderLayer, Stack
from fairseq_layernorm_plugins.modules.stacks import MethodLayersCheck, PluginTransformerDecoder, build_layer
from layernorm_methods.norms import STACK_NORM_NAMES, norm_type_


class PluginS2TEncoder(MethodLayersCheck, S2TTransformerEncoder):
    """fairseq's speech encoder with ``args.encoder_layers`` layers of class :attr:`layer_cls`,
    which the method's ``init_stack_`` then sets up as it does a text encoder's (they are
    :attr:`layers` here too).

    Input ``src_tokens`` (B, T, F) filter-bank frames, ``src_lengths`` (B,); output
    ``encoder_out["encoder_out"][0]`` (T', B, C), T' = T / 4 after the subsampler's two
    stride-2 convolutions.
    """

    layer_cls = PluginEncoderLayer
    __jit_unused_properties__ = ["layers"]

    def __init__(self, args, layer_cls=None):
        if layer_cls is not None:
            self.layer_cls = layer_cls
        # fairseq's subsampler, positions and final LayerNorm; none of its stock layers, no CTC projection yet
        super().__init__(argparse.Namespace(**{**vars(args), "encoder_layers": 0, "ctc_weight": 0.0}))
        self.dropout_module.module_name = S2TTransformerEncoder.__name__  # as stock fairseq
        cfg = TransformerConfig.from_namespace(args)
        stack = Stack.of(cfg, "encoder")
        self.transformer_layers = nn.ModuleList(
            build_layer(self.layer_cls, cfg, TransformerEncoderLayer, stack) for _ in range(stack.num_layers)
        )
        if getattr(args, "ctc_weight", 0.0) > 0.0:  # fairseq builds it after the layers
            self.ctc_proj = nn.Linear(args.encoder_embed_dim, args.tgt_dict_size)
        norm_type_(self, cfg, STACK_NORM_NAMES)
        self.layer_cls.init_stack_(self, cfg, stack)

    @property
    def layers(self):
        """The layers (fairseq keeps them as ``transformer_layers``), under the name a text
        encoder gives them, which the methods' stack set-up and Admin's profiling read."""
        return self.transformer_layers


class PluginS2TDecoder(PluginTransformerDecoder):
    """fairseq's speech-to-text decoder (``TransformerDecoderScriptable``: the text decoder
    whose ``extract_features`` returns the encoder output for CTC and joint criteria) with
    layers of class :attr:`layer_cls`, built from the model's args.

    Input ``prev_output_tokens`` (B, T); output logits (B, T, V)."""

    extract_features = TransformerDecoderScriptable.extract_features

    def __init__(self, args, dictionary, embed_tokens, layer_cls=None):
        self.args = args  # as fairseq's TransformerDecoder keeps them
        super().__init__(TransformerConfig.from_namespace(args), dictionary, embed_tokens, layer_cls=layer_cls)
        self.dropout_module.module_name = TransformerDecoderScriptable.__name__  # as stock fairseq
