"""Normalisation layers beside fairseq's LayerNorm, and swapping them into built layers.

* ``--norm-type rmsnorm`` (every method that has a normalisation layer): RMSNorm (Zhang and
  Sennrich 2019) in place of each LayerNorm, torch's ``nn.RMSNorm``: x / sqrt(mean(x^2) + eps) * g,
  eps 1e-5 as fairseq's LayerNorm (the authors' reference code adds eps 1e-8 outside the sqrt);
* :class:`DynamicTanh` (DyT, Zhu et al. 2025): gamma * tanh(alpha x) + beta;
* :class:`ScaledNorm`: a normalisation layer whose output is multiplied by a constant
  (LayerNorm Scaling).
"""

import torch
from torch import Tensor, nn

NORM_TYPES = ("layernorm", "rmsnorm")
LAYER_NORM_NAMES = ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm")
STACK_NORM_NAMES = ("layer_norm", "layernorm_embedding")


class DynamicTanh(nn.Module):
    """DyT(x) = gamma * tanh(alpha x) + beta (Zhu et al. 2025): alpha one learnable
    scalar, ``alpha_init`` (the paper's default 0.5), gamma ones, beta zeros (jiachenzhu/DyT).

    Input (..., C); output (..., C)."""

    def __init__(self, dim, alpha_init=0.5):
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.alpha * x) * self.weight + self.bias  # Zhu et al. 2025: gamma * tanh(alpha x) + beta


class ScaledNorm(nn.Module):
    """``norm(x) * scale``: a normalisation layer with its output scaled by a constant.

    Input (..., C); output (..., C)."""

    def __init__(self, norm, scale):
        super().__init__()
        self.norm = norm
        self.scale = float(scale)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x) * self.scale


def norm_dim(norm):
    """The feature size a LayerNorm-like module normalises."""
    return norm.normalized_shape[-1] if hasattr(norm, "normalized_shape") else norm.weight.shape[-1]


def replace_norms_(module, names, make):
    """Replace each of ``module``'s normalisation layers ``names`` (those it has) by
    ``make(old)``, in place."""
    for name in names:
        old = getattr(module, name, None)
        if isinstance(old, nn.Module) and not isinstance(old, nn.Identity):
            setattr(module, name, make(old))


def rms_norm(old):
    """torch's RMSNorm in place of LayerNorm ``old``, with its eps (fairseq's 1e-5)."""
    return nn.RMSNorm(norm_dim(old), eps=old.eps)


def norm_type_(module, cfg, names):
    """``--norm-type``: swap ``module``'s LayerNorms ``names`` for RMSNorm when asked."""
    kind = getattr(cfg, "norm_type", None) or "layernorm"
    if kind not in NORM_TYPES:
        raise ValueError(f"--norm-type must be one of {', '.join(NORM_TYPES)}, not {kind!r}")
    if kind == "rmsnorm":
        replace_norms_(module, names, rms_norm)
