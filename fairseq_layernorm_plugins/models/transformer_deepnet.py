"""DeepNet / DeepNorm (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000
Layers"): Post-LN with an up-weighted residual, x_{i} = LN(alpha * x_{i-1} + f_i(x_{i-1})),
and Xavier-normal initialisation with gain beta for fc1, fc2 and the attention's
v/out projections (gain 1 for q/k), as in the paper's pseudocode (Fig. 2). The
encoder-decoder constants, with N encoder and M decoder layers (paper Table 1):

    encoder: alpha = 0.81 (N^4 M)^(1/16),  beta = 0.87 (N^4 M)^(-1/16)
    decoder: alpha = (3M)^(1/4),           beta = (12M)^(-1/4)

It is the method the B2T paper compares against.
"""

import torch
from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import POST_LN_ONLY, PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer, attentions


def deepnet_encoder_constants(num_encoder_layers, num_decoder_layers):
    """(alpha, beta) of the encoder: 0.81 (N^4 M)^(1/16), 0.87 (N^4 M)^(-1/16) (Wang et al. 2022, Table 1)."""
    base = num_encoder_layers**4 * num_decoder_layers
    return 0.81 * base ** (1 / 16), 0.87 * base ** (-1 / 16)


def deepnet_decoder_constants(num_decoder_layers):
    """(alpha, beta) of the decoder: (3M)^(1/4), (12M)^(-1/4) (Wang et al. 2022, Table 1)."""
    return (3 * num_decoder_layers) ** 0.25, (12 * num_decoder_layers) ** -0.25


class DeepNormLayerMixin:
    """x = LN(alpha * residual + f(residual)); DeepNet's initialisation with gain beta."""

    def deepnorm_init_(self, alpha, beta):
        self.alpha = alpha
        with torch.no_grad():
            for attn in attentions(self):
                for proj in (attn.q_proj, attn.k_proj):
                    torch.nn.init.xavier_normal_(proj.weight, gain=1.0)
                for proj in (attn.v_proj, attn.out_proj):
                    torch.nn.init.xavier_normal_(proj.weight, gain=beta)
            for fc in (self.fc1, self.fc2):
                torch.nn.init.xavier_normal_(fc.weight, gain=beta)

    def residual_connection(self, x, residual):
        return residual * self.alpha + x


class DeepNetEncoderLayer(DeepNormLayerMixin, PluginEncoderLayer):
    def __init__(self, cfg, return_fc=False):
        super().__init__(cfg, return_fc=return_fc)
        self.deepnorm_init_(*deepnet_encoder_constants(cfg.encoder.layers, cfg.decoder.layers))


class DeepNetDecoderLayer(DeepNormLayerMixin, PluginDecoderLayer):
    def __init__(self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False):
        super().__init__(cfg, no_encoder_attn, add_bias_kv, add_zero_attn)
        self.deepnorm_init_(*deepnet_decoder_constants(cfg.decoder.layers))


@register_model("transformer_deepnet")
class TransformerDeepNetModel(PluginTransformerModel):
    """Post-LN encoder-decoder Transformer with DeepNorm."""

    encoder_layer_cls = DeepNetEncoderLayer
    decoder_layer_cls = DeepNetDecoderLayer
    incompatible_flags = POST_LN_ONLY


def deepnet_defaults(args):
    """DeepNet (Wang et al. 2022): Post-LN with DeepNorm residuals and initialisation."""
    args.encoder_normalize_before = getattr(args, "encoder_normalize_before", False)
    args.decoder_normalize_before = getattr(args, "decoder_normalize_before", False)


ARCHS = register_arch_family("transformer_deepnet", deepnet_defaults)
METHOD = register_method("deepnet", "transformer_deepnet", "DeepNet", "Wang et al. 2022", order=5)
