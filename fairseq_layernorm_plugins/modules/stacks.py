"""Encoder and decoder stacks that build a method's own layer class.

fairseq's ``TransformerEncoderBase.build_encoder_layer`` hard-codes
``TransformerEncoderLayerBase``; these subclasses build ``layer_cls`` (a constructor
argument, or a class attribute of a subclass) instead, tell each layer its
:class:`~fairseq_layernorm_plugins.modules.layers.Stack`, wrap it exactly as fairseq does
(activation checkpointing, FSDP), and once every layer exists call the layer class's
``init_stack_`` hook (``modules/layers.py``).
"""

from fairseq.distributed import FullyShardedDataParallel, fsdp_wrap
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase, TransformerEncoderBase
from fairseq.models.transformer.transformer_decoder import module_name_fordropout as decoder_dropout_name
from fairseq.models.transformer.transformer_encoder import module_name_fordropout as encoder_dropout_name
from fairseq.modules import FairseqDropout
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from fairseq_layernorm_plugins.modules.layers import PluginDecoderLayer, PluginEncoderLayer
from layernorm_methods import layers as core_layers
from layernorm_methods.layers import Stack
from layernorm_methods.norms import STACK_NORM_NAMES, norm_type_

stack_layers = core_layers.stack_layers


class MethodLayersCheck:
    """What the fairseq stacks check before a method sets up or reads their layers."""

    def check_method_layers(self, layers):
        """Layers wrapped by fully-sharded data parallel are refused: FSDP flattens a layer's
        parameters when it wraps it, and sets attributes on the wrapper."""
        if any(isinstance(layer, FullyShardedDataParallel) for layer in layers):
            raise ValueError(
                f"{type(self).__name__}: --ddp-backend fully_sharded wraps each layer before this method sets its "
                "layers up; train it with --ddp-backend c10d (or no_c10d, legacy_ddp)"
            )


def name_dropout_modules(module, name, own_name):
    """Give the dropout modules fairseq named after ``own_name`` (a method's layer class)
    the stock name ``name``, so ``--retain-dropout-modules`` takes the names it takes for
    fairseq's own transformer (TransformerEncoderLayerBase, ...)."""
    for child in module.modules():
        if isinstance(child, FairseqDropout) and child.module_name == own_name:
            child.module_name = name


def wrap_layer(layer, cfg):
    """Apply ``--checkpoint-activations`` / ``--offload-activations`` and FSDP wrapping
    the way fairseq's own ``build_{encoder,decoder}_layer`` do."""
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    # a checkpointed layer is always wrapped by FSDP, whatever its size (as in fairseq)
    return fsdp_wrap(layer, min_num_params=0 if checkpoint else cfg.min_params_to_wrap)


def build_layer(layer_cls, cfg, stock_cls, stack, **kwargs):
    """One layer of ``layer_cls`` for ``stack``, its dropout modules named as ``stock_cls``'s
    (the fairseq layer it stands in for), wrapped as fairseq wraps its own."""
    layer = layer_cls(cfg, stack=stack, **kwargs)
    name_dropout_modules(layer, stock_cls.__name__, type(layer).__name__)
    return wrap_layer(layer, cfg)


class PluginTransformerEncoder(MethodLayersCheck, TransformerEncoderBase):
    """fairseq's encoder with ``cfg.encoder.layers`` layers of class :attr:`layer_cls`.

    Input ``src_tokens`` (B, S); output ``encoder_out["encoder_out"][0]`` (S, B, C).
    """

    layer_cls = PluginEncoderLayer

    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False, layer_cls=None):
        if layer_cls is not None:
            self.layer_cls = layer_cls  # set before fairseq's __init__, which builds the layers
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        self.dropout_module.module_name = encoder_dropout_name(TransformerEncoderBase.__name__)  # as stock fairseq
        norm_type_(self, cfg, STACK_NORM_NAMES)
        self.layer_cls.init_stack_(self, cfg, Stack.of(cfg, "encoder"))

    def build_encoder_layer(self, cfg):
        return build_layer(
            self.layer_cls, cfg, TransformerEncoderLayerBase, Stack.of(cfg, "encoder"), return_fc=self.return_fc
        )


class PluginTransformerDecoder(MethodLayersCheck, TransformerDecoderBase):
    """fairseq's decoder with ``cfg.decoder.layers`` layers of class :attr:`layer_cls`;
    :attr:`stack_kind` ``decoder`` (of an encoder-decoder) or ``lm`` (a decoder-only model).

    Input ``prev_output_tokens`` (B, T); output logits (B, T, V).
    """

    layer_cls = PluginDecoderLayer
    stack_kind = "decoder"

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None, layer_cls=None):
        if layer_cls is not None:
            self.layer_cls = layer_cls  # set before fairseq's __init__, which builds the layers
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn, output_projection)
        self.dropout_module.module_name = decoder_dropout_name(TransformerDecoderBase.__name__)  # as stock fairseq
        norm_type_(self, cfg, STACK_NORM_NAMES)
        self.layer_cls.init_stack_(self, cfg, Stack.of(cfg, self.stack_kind))

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        stack = Stack.of(cfg, self.stack_kind)
        return build_layer(self.layer_cls, cfg, TransformerDecoderLayerBase, stack, no_encoder_attn=no_encoder_attn)


class PluginLanguageModelDecoder(PluginTransformerDecoder):
    """The decoder of a decoder-only language model (``stack_kind`` ``lm``: no encoder
    attention), built from fairseq's language-model args as its ``TransformerDecoder`` is
    (``TransformerConfig.from_namespace``: adaptive input and softmax, tied weights).

    Input ``src_tokens`` (B, T); output logits (B, T, V)."""

    stack_kind = "lm"

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=True, output_projection=None, layer_cls=None):
        self.args = args
        cfg = TransformerConfig.from_namespace(args)
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn, output_projection, layer_cls=layer_cls)
