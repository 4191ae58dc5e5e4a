"""DeepNet / DeepNorm (Wang et al. 2022) as fairseq models: ``transformer_deepnet``,
``transformer_lm_deepnet`` (Table 1's decoder-only row) and ``s2t_transformer_deepnet``, whose
layers mix in the core's :class:`~layernorm_methods.methods.deepnet.DeepNormLayerMixin` (the
formulas and options are described there). Option: ``--deepnet-init paper|torchscale``.

alpha and beta come from the depth the model was built for: loading a checkpoint with
``--model-overrides "{'encoder_layers_to_keep': ...}"`` keeps the alpha every kept layer
was trained with (``encoder_layers`` / ``decoder_layers`` as trained, not the kept count:
``deepnet_depth``, set by :meth:`DeepNetModel.method_args`).
"""

from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer
from layernorm_methods.methods.deepnet import DEEPNET_INITS, DeepNormLayerMixin
from layernorm_methods.methods.deepnet import METHOD as CORE


class DeepNetEncoderLayer(DeepNormLayerMixin, PluginEncoderLayer):
    """DeepNet's encoder layer: alpha = 0.81 (N^4 M)^(1/16)."""


class DeepNetDecoderLayer(DeepNormLayerMixin, PluginDecoderLayer):
    """DeepNet's decoder layer: alpha = (3M)^(1/4)."""


class DeepNetModel:
    """What DeepNet adds to a model of any kind: its option, the depth it was built for."""

    @staticmethod
    def add_method_args(parser):
        parser.add_argument(
            "--deepnet-init",
            choices=DEEPNET_INITS,
            help="paper: the paper's pseudo-code (xavier_normal_ gain beta on v/out/fc1/fc2, gain 1 on q/k; "
            "default); torchscale: the authors' torchscale (default init, then fc1/fc2/v/out weights and "
            "biases divided by (N^4 M)^(1/16)/1.15 in the encoder, (12M)^(1/4) in the decoder)",
        )

    @classmethod
    def method_args(cls, args):
        # fairseq sets encoder_layers to the number of --encoder-layers-to-keep before the
        # layers are built; alpha stays the one the trained layers were trained with
        args.deepnet_depth = (getattr(args, "encoder_layers", 0), args.decoder_layers)  # a language model: (0, M)


@register_model("transformer_deepnet")
class TransformerDeepNetModel(DeepNetModel, PluginTransformerModel):
    """Post-LN encoder-decoder Transformer with DeepNorm."""

    encoder_layer_cls = DeepNetEncoderLayer
    decoder_layer_cls = DeepNetDecoderLayer


@register_model("transformer_lm_deepnet")
class TransformerDeepNetLanguageModel(DeepNetModel, PluginTransformerLanguageModel):
    """Post-LN decoder-only language model with DeepNorm."""

    decoder_layer_cls = DeepNetDecoderLayer


@register_model("s2t_transformer_deepnet")
class S2TDeepNetModel(DeepNetModel, PluginS2TTransformerModel):
    """Post-LN speech-to-text Transformer with DeepNorm."""

    encoder_layer_cls = DeepNetEncoderLayer
    decoder_layer_cls = DeepNetDecoderLayer


ARCHS = register_arch_family("transformer_deepnet", CORE)
LM_ARCHS = register_lm_arch_family("transformer_lm_deepnet", CORE)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_deepnet", CORE)
METHOD = register_method(
    "deepnet",
    "transformer_deepnet",
    "DeepNet",
    "Wang et al. 2022",
    order=5,
    lm_model="transformer_lm_deepnet",
    s2t_model="s2t_transformer_deepnet",
)
