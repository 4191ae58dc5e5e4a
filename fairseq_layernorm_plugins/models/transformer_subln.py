"""Sub-LN / Magneto (Wang et al. 2022, "Foundation Transformers"; the authors' code is
microsoft/torchscale): Pre-LN plus a second LayerNorm inside the sub-layer, on the input of
its output projection,

    x_i = x_{i-1} + W_out LN_sub(g(W_in LN(x_{i-1})))

in self-attention (LN_sub over the concatenated heads, d_model wide, before ``out_proj``:
torchscale's ``inner_attn_ln``) and in the FFN (LN_sub over the activations, FFN-dim wide,
after the activation dropout and before ``fc2``: torchscale's ``ffn_layernorm``), with Pre-LN's
final LayerNorm on each stack. The decoder's encoder attention is Pre-LN's: torchscale gives
it no inner LayerNorm (``subln and self.self_attention``).

Magneto's initialisation, ``--subln-init torchscale`` (the default): the layer as
``--init-style`` built it, then the weights *and biases* of the self-attention's v_proj and
out_proj and of fc1 and fc2 multiplied by a gain gamma of the depth (N encoder, M decoder layers):

    encoder of an encoder-decoder:  gamma = sqrt(log(3M) log(2N) / 3)
    decoder of an encoder-decoder:  gamma = sqrt(log(3M))
    decoder-only model of M layers: gamma = sqrt(log(2M))

(torchscale ``architecture/encoder.py`` and ``decoder.py``, ``if args.subln``); q_proj, k_proj,
the encoder attention and the LayerNorms keep theirs. ``--subln-init none`` is the Sub-LN
placement alone. The paper draws xavier_normal_ with gain gamma instead (docs/fidelity.md).
"""

import math

import torch
import torch.nn.functional as F
from fairseq.models import register_model
from fairseq.modules import LayerNorm
from fairseq.modules.quant_noise import quant_noise
from torch import Tensor, nn

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer
from layernorm_methods.norms import norm_type_

SUBLN_INITS = ("torchscale", "none")


def magneto_gain(kind, num_encoder_layers, num_decoder_layers):
    """gamma of a stack of ``kind`` (``encoder``, ``decoder`` of an encoder-decoder; ``lm``: decoder-only)."""
    n, m = num_encoder_layers, num_decoder_layers
    if kind == "encoder":
        return math.sqrt(math.log(3 * m) * math.log(2 * n) / 3)  # Magneto (Wang et al. 2022); torchscale Encoder
    if kind == "decoder":
        return math.sqrt(math.log(3 * m))  # Magneto (Wang et al. 2022); torchscale Decoder, is_encoder_decoder
    return math.sqrt(math.log(2 * m))  # Magneto (Wang et al. 2022); torchscale Decoder without an encoder


class NormedLinear(nn.Linear):
    """A linear layer that normalises its input first: the output projection of a Sub-LN
    sub-layer. Its ``weight`` and ``bias`` are ``nn.Linear``'s (drawn as ``nn.Linear`` draws
    them), the LayerNorm is ``norm``.

    Input (..., in_features); output (..., out_features)."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.norm = LayerNorm(in_features)

    @classmethod
    def wrapping(cls, linear):
        """``linear``'s own weight and bias (and pre-hooks: ``--quant-noise-pq``'s) behind a new
        LayerNorm: nothing is drawn (the linear part is made on the meta device), so the random
        stream stays Pre-LN's."""
        normed = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        normed.weight, normed.bias = linear.weight, linear.bias
        normed._forward_pre_hooks.update(linear._forward_pre_hooks)
        return normed

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(self.norm(x), self.weight, self.bias)  # Wang et al. 2022, Sub-LN: W_out LN(h) + b


class SubLNLayerMixin:
    """Sub-LN's two inner LayerNorms (fairseq's ``build_fc2`` / ``build_self_attention`` hooks)
    and Magneto's initialisation (``method_init_``).

    Input x (T, B, C); output (T, B, C), as fairseq's layer."""

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        return quant_noise(NormedLinear(input_dim, output_dim), p=q_noise, block_size=qn_block_size)

    def build_self_attention(self, embed_dim, cfg, *args, **kwargs):
        attn = super().build_self_attention(embed_dim, cfg, *args, **kwargs)
        attn.out_proj = NormedLinear.wrapping(attn.out_proj)
        # fairseq's attention hands a call without incremental state to F.multi_head_attention_forward,
        # which applies out_proj's weights itself; this flag keeps every call on fairseq's own path,
        # which calls the out_proj module (same arithmetic, unfused; docs/fidelity.md)
        attn.skip_embed_dim_check = True
        return attn

    def method_init_(self, cfg, stack):
        super().method_init_(cfg, stack)
        norm_type_(self.fc2, cfg, ("norm",))
        norm_type_(self.self_attn.out_proj, cfg, ("norm",))
        style = getattr(cfg, "subln_init", None) or "torchscale"
        if style not in SUBLN_INITS:
            raise ValueError(f"--subln-init must be one of {', '.join(SUBLN_INITS)}, not {style!r}")
        if style == "none":
            return
        gain = magneto_gain(stack.kind, stack.num_layers, cfg.decoder.layers)
        with torch.no_grad():
            for proj in (self.self_attn.v_proj, self.self_attn.out_proj, self.fc1, self.fc2):
                for p in (proj.weight, proj.bias):
                    if p is not None:
                        p.mul_(gain)


class SubLNEncoderLayer(SubLNLayerMixin, PluginEncoderLayer):
    """Sub-LN's encoder layer: gain sqrt(log(3M) log(2N) / 3)."""


class SubLNDecoderLayer(SubLNLayerMixin, PluginDecoderLayer):
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


def subln_defaults(args):
    """Sub-LN / Magneto (Wang et al. 2022): Pre-LN plus a LayerNorm before each output projection."""
    args.subln_init = getattr(args, "subln_init", None) or "torchscale"


ARCHS = register_arch_family("transformer_subln", subln_defaults, normalize_before=True)
LM_ARCHS = register_lm_arch_family("transformer_lm_subln", subln_defaults, normalize_before=True)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_subln", subln_defaults, normalize_before=True)
METHOD = register_method(
    "subln",
    "transformer_subln",
    "Sub-LN (Magneto)",
    "Wang et al. 2022 (Magneto)",
    order=14,
    lm_model="transformer_lm_subln",
    s2t_model="s2t_transformer_subln",
)
