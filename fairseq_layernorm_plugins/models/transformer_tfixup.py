"""T-Fixup (Huang et al. 2020) as fairseq models: ``transformer_tfixup`` and
``transformer_lm_tfixup`` (a decoder-only form of our own: the authors published none), whose
layers mix in the core's :class:`~layernorm_methods.methods.tfixup.TFixupLayerMixin` (the
formulas and options are described there). No LayerNorm anywhere; train without warm-up
(``--lr-scheduler inverse_sqrt_nowarmup``). Option: ``--tfixup-qkv-bias fork|zero``.
"""

from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.family import NORM_PLACEMENT
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer
from layernorm_methods.methods.tfixup import METHOD as CORE
from layernorm_methods.methods.tfixup import NO_LAYER_NORM, TFIXUP_QKV_BIASES, TFixupLayerMixin


class TFixupEncoderLayer(TFixupLayerMixin, PluginEncoderLayer):
    """T-Fixup's encoder layer: no LayerNorm, v/out/fc1/fc2 x 0.67 N_e^-1/4."""


class TFixupDecoderLayer(TFixupLayerMixin, PluginDecoderLayer):
    """T-Fixup's decoder layer: no LayerNorm, v/out/fc1/fc2 x (9 N_d)^-1/4."""


class TFixupModel:
    """What T-Fixup adds to a model of any kind: its option, no LayerNorm anywhere."""

    incompatible_flags = {**dict.fromkeys(NORM_PLACEMENT, NO_LAYER_NORM["layernorm_embedding"]), **NO_LAYER_NORM}

    @staticmethod
    def add_method_args(parser):
        parser.add_argument(
            "--tfixup-qkv-bias",
            choices=TFIXUP_QKV_BIASES,
            help="fork: the attention's q/k/v biases at nn.Linear's default U(+-1/sqrt(fan_in)), as the "
            "authors' fork (fairseq 0.9) leaves them (default); zero: fairseq 0.8's zero in_proj_bias",
        )


@register_model("transformer_tfixup")
class TransformerTFixupModel(TFixupModel, PluginTransformerModel):
    """LayerNorm-free encoder-decoder Transformer with T-Fixup initialisation."""

    encoder_layer_cls = TFixupEncoderLayer
    decoder_layer_cls = TFixupDecoderLayer


@register_model("transformer_lm_tfixup")
class TransformerTFixupLanguageModel(TFixupModel, PluginTransformerLanguageModel):
    """LayerNorm-free decoder-only language model with T-Fixup initialisation."""

    decoder_layer_cls = TFixupDecoderLayer


ARCHS = register_arch_family("transformer_tfixup", CORE)
LM_ARCHS = register_lm_arch_family("transformer_lm_tfixup", CORE)
METHOD = register_method(
    "tfixup", "transformer_tfixup", "T-Fixup", "Huang et al. 2020", order=3, lm_model="transformer_lm_tfixup"
)
