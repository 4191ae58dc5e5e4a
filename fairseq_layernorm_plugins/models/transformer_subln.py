"""Sub-LN / Magneto (Wang et al. 2022, "Foundation Transformers") as fairseq models:
``transformer_subln``, ``transformer_lm_subln`` and ``s2t_transformer_subln``, whose layers mix
in the core's :class:`~layernorm_methods.methods.subln.SubLNLayerMixin` (the formulas and
Magneto's initialisation are described there). Option: ``--subln-init torchscale|none``.
"""

from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer
from layernorm_methods.methods.subln import METHOD as CORE
from layernorm_methods.methods.subln import SUBLN_INITS, SubLNLayerMixin


class FairseqSubLNMixin(SubLNLayerMixin):
    """Sub-LN in fairseq's layers: its attention keeps calling the ``out_proj`` module."""

    def build_self_attention(self, embed_dim, cfg, *args, **kwargs):
        attn = super().build_self_attention(embed_dim, cfg, *args, **kwargs)
        # fairseq's attention hands a call without incremental state to F.multi_head_attention_forward,
        # which applies out_proj's weights itself; this flag keeps every call on fairseq's own path,
        # which calls the out_proj module (same arithmetic, unfused; docs/fidelity.md)
        attn.skip_embed_dim_check = True
        return attn


class SubLNEncoderLayer(FairseqSubLNMixin, PluginEncoderLayer):
    """Sub-LN's encoder layer: gain sqrt(log(3M) log(2N) / 3)."""


class SubLNDecoderLayer(FairseqSubLNMixin, PluginDecoderLayer):
    """Sub-LN's decoder layer: gain sqrt(log(3M)), or sqrt(log(2M)) in a decoder-only model."""


class SubLNModel:
    """What Sub-LN adds to a model of any kind: its option; fairseq's NormFormer ``--scale-fc``
    (a language model's) would put a second LayerNorm before fc2."""

    incompatible_flags = {"scale_fc": "Sub-LN already normalises the FFN's activations before fc2"}

    @staticmethod
    def add_method_args(parser):
        parser.add_argument(
            "--subln-init",
            choices=SUBLN_INITS,
            help="torchscale (default): Magneto's initialisation as microsoft/torchscale does it, the weights "
            "and biases of self-attention v_proj/out_proj and fc1/fc2 multiplied by sqrt(log(3M) log(2N) / 3) "
            "in the encoder, sqrt(log(3M)) in the decoder, sqrt(log(2M)) in a decoder-only model; none: "
            "the Sub-LN placement alone, initialised as --init-style says",
        )


@register_model("transformer_subln")
class TransformerSubLNModel(SubLNModel, PluginTransformerModel):
    """Sub-LN / Magneto encoder-decoder Transformer."""

    encoder_layer_cls = SubLNEncoderLayer
    decoder_layer_cls = SubLNDecoderLayer


@register_model("transformer_lm_subln")
class TransformerSubLNLanguageModel(SubLNModel, PluginTransformerLanguageModel):
    """Sub-LN / Magneto decoder-only language model."""

    decoder_layer_cls = SubLNDecoderLayer


@register_model("s2t_transformer_subln")
class S2TSubLNModel(SubLNModel, PluginS2TTransformerModel):
    """Sub-LN / Magneto speech-to-text Transformer."""

    encoder_layer_cls = SubLNEncoderLayer
    decoder_layer_cls = SubLNDecoderLayer


ARCHS = register_arch_family("transformer_subln", CORE)
LM_ARCHS = register_lm_arch_family("transformer_lm_subln", CORE)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_subln", CORE)
METHOD = register_method(
    "subln",
    "transformer_subln",
    "Sub-LN (Magneto)",
    "Wang et al. 2022 (Magneto)",
    order=14,
    lm_model="transformer_lm_subln",
    s2t_model="s2t_transformer_subln",
)
