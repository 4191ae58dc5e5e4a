"""DeepNet / DeepNorm (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000
Layers"): Post-LN with an up-weighted residual, x_{i} = LN(alpha * x_{i-1} + f_i(x_{i-1})),
and a down-scaled initialisation of fc1, fc2 and the attention's v/out projections. The
encoder-decoder residual weights, with N encoder and M decoder layers (paper Table 1;
torchscale the same):

    encoder: alpha = 0.81 (N^4 M)^(1/16)        decoder: alpha = (3M)^(1/4)

and a decoder-only language model of M layers (Table 1's decoder-only row, torchscale's
decoder without an encoder): alpha = (2M)^(1/4), beta = (8M)^(-1/4).

The initialisation exists in two versions by its authors, ``deepnet_init`` (``--deepnet-init``):

* ``paper`` (default; the paper's pseudo-code, Fig. 2): ``xavier_normal_`` with gain beta
  on v/out/fc1/fc2 and gain 1 on q/k, encoder beta = 0.87 (N^4 M)^(-1/16), decoder
  beta = (12M)^(-1/4) (Table 1). Biases stay as ``init_style`` leaves them (zero with
  ``paper``, ``nn.Linear``'s default with ``fairseq``);
* ``torchscale`` (microsoft/torchscale, ``architecture/encoder.py`` and ``decoder.py``):
  the layer's default initialisation kept, then every weight *and bias* of fc1/fc2/v/out
  divided by the encoder's (N^4 M)^(1/16) / 1.15 or the decoder's (12M)^(1/4). Its
  encoder factor is 1.15 (N^4 M)^(-1/16), not the paper's 0.87: the two versions' matrices
  differ by 0.46x-1.32x in standard deviation at 6L-6L (with ``init_style`` ``fairseq``,
  which is torchscale's own default initialisation).

alpha and beta come from the depth the model was built for (:func:`trained_depth`): the
fairseq model records it as ``deepnet_depth`` before fairseq shrinks ``encoder_layers`` to
``--encoder-layers-to-keep``, so every kept layer keeps the alpha it was trained with; a
core model is built at its full depth, ``cfg.encoder.layers`` and ``cfg.decoder.layers``.

It is the method the B2T paper compares against (its Table 5, with the authors' own
implementation of the paper: the official code was not public yet).
"""

import torch

from layernorm_methods.init import attentions
from layernorm_methods.registry import register

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
    """(N, M) the model was built for: ``cfg.deepnet_depth`` (set by the fairseq model's
    build_model before fairseq shrinks ``encoder_layers`` to the kept layers), else the layer
    counts ``cfg.encoder.layers``, ``cfg.decoder.layers`` (a core or a fairseq config)."""
    depth = getattr(cfg, "deepnet_depth", None)
    return tuple(depth) if depth else (cfg.encoder.layers, cfg.decoder.layers)


class DeepNormLayerMixin:
    """x = LN(alpha * residual + f(residual)); DeepNet's initialisation (``deepnet_init``).

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
        return residual * self.alpha + x  # Wang et al. 2022, Fig. 2 (DeepNorm): LN(x * alpha + f(x))


def deepnet_defaults(args):
    """DeepNet (Wang et al. 2022): Post-LN with DeepNorm residuals and initialisation."""
    args.deepnet_init = getattr(args, "deepnet_init", None) or "paper"


METHOD = register("deepnet", DeepNormLayerMixin, deepnet_defaults, normalize_before=False)
