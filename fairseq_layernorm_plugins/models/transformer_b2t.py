"""B2T connection (Takase et al. 2023) as fairseq models: ``transformer_b2t``,
``transformer_lm_b2t`` (Sec. 6.3) and ``s2t_transformer_b2t``, whose layers mix in the core's
:class:`~layernorm_methods.methods.b2t.B2TLayerMixin` (the formulas and options are described
there). Options: ``--b2t-no-layer-norm`` (App. D, "w/o LN"), ``--b2t-weight-rescale`` (the
authors' later code); ``--init-style fairseq`` by default, as the authors' fork.
"""

from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer
from layernorm_methods.methods.b2t import METHOD as CORE
from layernorm_methods.methods.b2t import B2TLayerMixin


class B2TEncoderLayer(B2TLayerMixin, PluginEncoderLayer):
    """B2T's encoder layer: the layer input is added at the FFN's residual."""


class B2TDecoderLayer(B2TLayerMixin, PluginDecoderLayer):
    """B2T's decoder layer: the layer input is added at the FFN's residual."""


class B2TModel:
    """What B2T adds to a model of any kind: its options."""

    @staticmethod
    def add_method_args(parser):
        parser.add_argument(
            "--b2t-no-layer-norm",
            action="store_true",
            help="remove every LayerNorm and use alpha*x + beta*(h + FFN(h)) (Takase et al. 2023, App. D)",
        )
        parser.add_argument(
            "--b2t-weight-rescale",
            action="store_true",
            help="multiply every weight matrix of a stack's layers by N^-0.5 (authors' later code; not in the paper)",
        )


@register_model("transformer_b2t")
class TransformerB2TModel(B2TModel, PluginTransformerModel):
    """Post-LN encoder-decoder Transformer with the bottom-to-top connection."""

    encoder_layer_cls = B2TEncoderLayer
    decoder_layer_cls = B2TDecoderLayer


@register_model("transformer_lm_b2t")
class TransformerB2TLanguageModel(B2TModel, PluginTransformerLanguageModel):
    """Post-LN decoder-only language model with the bottom-to-top connection (B2T Sec. 6.3)."""

    decoder_layer_cls = B2TDecoderLayer


@register_model("s2t_transformer_b2t")
class S2TB2TModel(B2TModel, PluginS2TTransformerModel):
    """Post-LN speech-to-text Transformer with the bottom-to-top connection."""

    encoder_layer_cls = B2TEncoderLayer
    decoder_layer_cls = B2TDecoderLayer


ARCHS = register_arch_family("transformer_b2t", CORE)
LM_ARCHS = register_lm_arch_family("transformer_lm_b2t", CORE)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_b2t", CORE)
METHOD = register_method(
    "b2t",
    "transformer_b2t",
    "B2T",
    "Takase et al. 2023",
    order=4,
    lm_model="transformer_lm_b2t",
    s2t_model="s2t_transformer_b2t",
)
