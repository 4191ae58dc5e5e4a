"""ResiDual (Xie et al. 2023) as fairseq models: ``transformer_residual``,
``transformer_lm_residual`` and ``s2t_transformer_residual``, whose layers mix in the core's
:class:`~layernorm_methods.methods.residual.ResiDualLayerMixin` (the dual stream, its output
``alpha * x_L + LN(d_L)`` and the options are described there). Options:
``--residual-dual-scale`` (s), ``--residual-alpha``; ``--init-style fairseq`` by default, as the
authors' plugin. The dual stream passes between layers outside fairseq's layer interface, so
these models run eagerly but are not scriptable (TorchScript refuses them in one line), and
take no ``--checkpoint-activations`` (refused: a checkpointed layer's first pass keeps no graph).
"""

from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer
from layernorm_methods.methods.residual import METHOD as CORE
from layernorm_methods.methods.residual import ResiDualLayerMixin


class ResiDualEncoderLayer(ResiDualLayerMixin, PluginEncoderLayer):
    """ResiDual's encoder layer."""


class ResiDualDecoderLayer(ResiDualLayerMixin, PluginDecoderLayer):
    """ResiDual's decoder layer."""


class ResiDualModel:
    """What ResiDual adds to a model of any kind: its options; not scriptable."""

    scriptable = False
    incompatible_flags = dict.fromkeys(
        ("checkpoint_activations", "offload_activations"),
        "a checkpointed layer runs without gradients the first time, and the dual stream it adds to "
        "leaves the layer outside its output",
    )

    @staticmethod
    def add_method_args(parser):
        parser.add_argument(
            "--residual-dual-scale",
            type=float,
            help="s, the dual stream's scale of the stack input and each branch output (default 1.0; the "
            "authors' 18L-18L fp16 config: 0.05)",
        )
        parser.add_argument("--residual-alpha", type=float, help="alpha on x_L in the output (default 1.0)")

    def __prepare_scriptable__(self):
        raise RuntimeError(
            f"{type(self).__name__}: ResiDual's dual stream passes between layers outside fairseq's layer "
            "interface, so the model runs eagerly only (no TorchScript)"
        )


@register_model("transformer_residual")
class TransformerResiDualModel(ResiDualModel, PluginTransformerModel):
    """ResiDual encoder-decoder Transformer."""

    encoder_layer_cls = ResiDualEncoderLayer
    decoder_layer_cls = ResiDualDecoderLayer


@register_model("transformer_lm_residual")
class TransformerResiDualLanguageModel(ResiDualModel, PluginTransformerLanguageModel):
    """ResiDual decoder-only language model."""

    decoder_layer_cls = ResiDualDecoderLayer


@register_model("s2t_transformer_residual")
class S2TResiDualModel(ResiDualModel, PluginS2TTransformerModel):
    """ResiDual speech-to-text Transformer."""

    encoder_layer_cls = ResiDualEncoderLayer
    decoder_layer_cls = ResiDualDecoderLayer


ARCHS = register_arch_family("transformer_residual", CORE)
LM_ARCHS = register_lm_arch_family("transformer_lm_residual", CORE)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_residual", CORE)
METHOD = register_method(
    "residual",
    "transformer_residual",
    "ResiDual",
    "Xie et al. 2023",
    order=11,
    lm_model="transformer_lm_residual",
    s2t_model="s2t_transformer_residual",
)
