"""LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth in Large Language Models"):
Pre-LN with every normalisation of layer l (counted from 1 in each stack) scaled by
1/sqrt(l),

    x_i = x_{i-1} + f_i(LN(x_{i-1}) / sqrt(l))

for each sub-layer of layer l; the stack's final LayerNorm is not scaled (the authors' code,
lmsdss/LayerNorm-Scaling: both norms of a layer share its factor, the final norm is plain).
The normalisation is whatever ``norm_type`` makes it (the paper's LLaMA models: RMSNorm).
"""

from layernorm_methods.layers import stack_layers
from layernorm_methods.norms import LAYER_NORM_NAMES, ScaledNorm, replace_norms_
from layernorm_methods.registry import register


def lns_scale(layer_number):
    """1/sqrt(l) for layer l = 1, 2, ... of a stack (Sun et al. 2025; lmsdss/LayerNorm-Scaling)."""
    return layer_number**-0.5


class LNSLayerMixin:
    """Each layer's norms get their factor per stack, once its index is known (``init_stack_``)."""

    @classmethod
    def init_stack_(cls, stack_module, cfg, stack):
        super().init_stack_(stack_module, cfg, stack)
        for index, layer in enumerate(stack_layers(stack_module)):
            replace_norms_(layer, LAYER_NORM_NAMES, lambda norm, n=index + 1: ScaledNorm(norm, lns_scale(n)))


def lns_defaults(args):
    """LayerNorm Scaling (Sun et al. 2025): Pre-LN, layer l's norms scaled by 1/sqrt(l)."""


METHOD = register("lns", LNSLayerMixin, lns_defaults, normalize_before=True)
