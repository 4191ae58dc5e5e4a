"""Sub-LN / Magneto (Wang et al. 2022, "Foundation Transformers"; the authors' code is
microsoft/torchscale): Pre-LN plus a second LayerNorm inside the sub-layer, on the input of
its output projection,

    x_i = x_{i-1} + W_out LN_sub(g(W_in LN(x_{i-1})))

in self-attention (LN_sub over the concatenated heads, d_model wide, before ``out_proj``:
torchscale's ``inner_attn_ln``) and in the FFN (LN_sub over the activations, FFN-dim wide,
after the activation dropout and before ``fc2``: torchscale's ``ffn_layernorm``), with Pre-LN's
final LayerNorm on each stack. The decoder's encoder attention is Pre-LN's: torchscale gives
it no inner LayerNorm (``subln and self.self_attention``).

Magneto's initialisation, ``subln_init`` (``--subln-init``) ``torchscale`` (the default): the
layer as ``init_style`` built it, then the weights *and biases* of the self-attention's v_proj
and out_proj and of fc1 and fc2 multiplied by a gain gamma of the depth (N encoder, M decoder
layers):

    encoder of an encoder-decoder:  gamma = sqrt(log(3M) log(2N) / 3)
    decoder of an encoder-decoder:  gamma = sqrt(log(3M))
    decoder-only model of M layers: gamma = sqrt(log(2M))

(torchscale ``architecture/encoder.py`` and ``decoder.py``, ``if args.subln``); q_proj, k_proj,
the encoder attention and the LayerNorms keep theirs. ``none`` is the Sub-LN placement alone.
The paper draws xavier_normal_ with gain gamma instead (docs/fidelity.md).
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from layernorm_methods.norms import norm_type_
from layernorm_methods.registry import register

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
        self.norm = nn.LayerNorm(in_features)

    @classmethod
    def wrapping(cls, linear):
        """``linear``'s own weight and bias (and pre-hooks: fairseq's ``--quant-noise-pq``'s) behind
        a new LayerNorm: nothing is drawn (the linear part is made on the meta device), so the
        random stream stays Pre-LN's."""
        normed = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        normed.weight, normed.bias = linear.weight, linear.bias
        normed._forward_pre_hooks.update(linear._forward_pre_hooks)
        return normed

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(self.norm(x), self.weight, self.bias)  # Wang et al. 2022, Sub-LN: W_out LN(h) + b


class SubLNLayerMixin:
    """Sub-LN's two inner LayerNorms (the ``build_fc2`` / ``build_self_attention`` hooks) and
    Magneto's initialisation (``method_init_``).

    Input x (T, B, C); output (T, B, C), as the base layer's."""

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        return self.quantised(NormedLinear(input_dim, output_dim), q_noise, qn_block_size)

    def build_self_attention(self, embed_dim, cfg, *args, **kwargs):
        attn = super().build_self_attention(embed_dim, cfg, *args, **kwargs)
        attn.out_proj = NormedLinear.wrapping(attn.out_proj)
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


def subln_defaults(args):
    """Sub-LN / Magneto (Wang et al. 2022): Pre-LN plus a LayerNorm before each output projection."""
    args.subln_init = getattr(args, "subln_init", None) or "torchscale"


METHOD = register("subln", SubLNLayerMixin, subln_defaults, normalize_before=True)
