"""DeepNet / DeepNorm (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000
Layers"): Post-LN with an up-weighted residual, x_{i} = LN(alpha * x_{i-1} + f_i(x_{i-1})),
and a down-scaled initialisation of fc1, fc2 and the attention's v/out projections. The
encoder-decoder residual weights, with N encoder and M decoder layers (paper Table 1;
torchscale the same):

    encoder: alpha = 0.81 (N^4 M)^(1/16)        decoder: alpha = (3M)^(1/4)

and a decoder-only language model of M layers (``transformer_lm_deepnet``; Table 1's
decoder-only row, torchscale's decoder without an encoder): alpha = (2M)^(1/4), beta = (8M)^(-1/4).

The initialisation exists in two versions by its authors, ``--deepnet-init``:

* ``paper`` (default; the paper's pseudo-code, Fig. 2): ``xavier_normal_`` with gain beta
  on v/out/fc1/fc2 and gain 1 on q/k, encoder beta = 0.87 (N^4 M)^(-1/16), decoder
  beta = (12M)^(-1/4) (Table 1). Biases stay as ``--init-style`` leaves them (zero with
  ``paper``, ``nn.Linear``'s default with ``fairseq``);
* ``torchscale`` (microsoft/torchscale, ``architecture/encoder.py`` and ``decoder.py``):
  the layer's default initialisation kept, then every weight *and bias* of fc1/fc2/v/out
  divided by the encoder's (N^4 M)^(1/16) / 1.15 or the decoder's (12M)^(1/4). Its
  encoder factor is 1.15 (N^4 M)^(-1/16), not the paper's 0.87: the two versions' matrices
  differ by 0.46x-1.32x in standard deviation at 6L-6L (with ``--init-style fairseq``,
  which is torchscale's own default initialisation).

alpha and beta come from the depth the model was built for: loading a checkpoint with
``--model-overrides "{'encoder_layers_to_keep': ...}"`` keeps the alpha every kept layer
was trained with (``encoder_layers`` / ``decoder_layers`` as trained, not the kept count).

It is the method the B2T paper compares against (its Table 5, with the authors' own
implementation of the paper: the official code was not public yet).
"""

import torch
from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer, attentions

DEEPNET_INITS = ("paper", "torchscale")


def deepnet_encoder_constants(num_encoder_layers, num_decoder_layers):
    """(alpha, beta) of the encoder: 0.81 (N^4 M)^(1/16), 0.87 (N^4 M)^(-1/16) (Wang et al. 2022, Table 1)."""
    base = num_encoder_layers**4 * num_decoder_layers
    return 0.81 * base ** (1 / 16), 0.87 * base ** (-1 / 16)


def deepnet_decoder_constants(num_decoder_layers):
    """(alpha, beta) of the decoder: (3M)^(1/4), (12M)^(-1/4) (Wang et al. 2022, Table 1)."""
    return (3 * num_decoder_layers) ** 0.25, (12 * num_decoder_layers) ** -0.25


def deepnet_lm_constants(num_layers):
    """(alpha, beta) of a decoder-only model: (2M)^(1/4), (8M)^(-1/4) (Wang et al. 2022, Table 1;
    torchscale architecture/decoder.py without an encoder)."""
    return (2 * num_layers) ** 0.25, (8 * num_layers) ** -0.25


def torchscale_encoder_divisor(num_encoder_layers, num_decoder_layers):
    """(N^4 M)^(1/16) / 1.15: what torchscale divides the encoder's fc1/fc2/v/out by (architecture/encoder.py)."""
    return (num_encoder_layers**4 * num_decoder_layers) ** 0.0625 / 1.15


def torchscale_decoder_divisor(num_decoder_layers):
    """(12M)^(1/4): what torchscale divides the decoder's fc1/fc2/v/out by (architecture/decoder.py)."""
    return (12 * num_decoder_layers) ** 0.25


def torchscale_lm_divisor(num_layers):
    """(8M)^(1/4): what torchscale divides a decoder-only model's fc1/fc2/v/out by (architecture/decoder.py)."""
    return (8 * num_layers) ** 0.25


def trained_depth(cfg):
    """(N, M) the model was built for: ``cfg.deepnet_depth`` (set by the model's build_model
    before fairseq shrinks ``encoder_layers`` to the kept layers), else the layer counts."""
    depth = getattr(cfg, "deepnet_depth", None)
    return tuple(depth) if depth else (cfg.encoder.layers, cfg.decoder.layers)


class DeepNormLayerMixin:
    """x = LN(alpha * residual + f(residual)); DeepNet's initialisation (``--deepnet-init``).

    Input x (T, B, C); ``residual_connection`` returns (T, B, C)."""

    def method_init_(self, cfg, stack):
        super().method_init_(cfg, stack)
        n, m = trained_depth(cfg)
        if stack.kind == "encoder":
            (alpha, beta), divisor = deepnet_encoder_constants(n, m), torchscale_encoder_divisor(n, m)
        elif stack.kind == "decoder":
            (alpha, beta), divisor = deepnet_decoder_constants(m), torchscale_decoder_divisor(m)
        else:
            (alpha, beta), divisor = deepnet_lm_constants(m), torchscale_lm_divisor(m)
        self.alpha = alpha
        style = getattr(cfg, "deepnet_init", None) or "paper"
        if style not in DEEPNET_INITS:
            raise ValueError(f"--deepnet-init must be one of {', '.join(DEEPNET_INITS)}, not {style!r}")
        scaled = [proj for attn in attentions(self) for proj in (attn.v_proj, attn.out_proj)] + [self.fc1, self.fc2]
        with torch.no_grad():
            if style == "paper":
                for attn in attentions(self):
                    for proj in (attn.q_proj, attn.k_proj):
                        torch.nn.init.xavier_normal_(proj.weight, gain=1.0)
                for proj in scaled:
                    torch.nn.init.xavier_normal_(proj.weight, gain=beta)
            else:
                for proj in scaled:
                    for p in (proj.weight, proj.bias):
                        if p is not None:
                            p.div_(divisor)

    def residual_connection(self, x, residual):
        return residual * self.alpha + x


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


def deepnet_defaults(args):
    """DeepNet (Wang et al. 2022): Post-LN with DeepNorm residuals and initialisation."""
    args.deepnet_init = getattr(args, "deepnet_init", None) or "paper"


ARCHS = register_arch_family("transformer_deepnet", deepnet_defaults, normalize_before=False)
LM_ARCHS = register_lm_arch_family("transformer_lm_deepnet", deepnet_defaults, normalize_before=False)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_deepnet", deepnet_defaults, normalize_before=False)
METHOD = register_method(
    "deepnet",
    "transformer_deepnet",
    "DeepNet",
    "Wang et al. 2022",
    order=5,
    lm_model="transformer_lm_deepnet",
    s2t_model="s2t_transformer_deepnet",
)
