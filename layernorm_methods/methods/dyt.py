"""DyT (Zhu et al. 2025, "Transformers without Normalization"): a Pre-LN Transformer with
every LayerNorm, the stacks' final ones included, replaced by Dynamic Tanh,

    DyT(x) = gamma * tanh(alpha x) + beta,    x_i = x_{i-1} + f_i(DyT(x_{i-1})),

alpha one learnable scalar per DyT layer starting at ``dyt_alpha_init`` (``--dyt-alpha-init``;
the paper's default 0.5; its LLaMA models start the attention, FFN and final ones apart, e.g.
0.8 / 0.2 / 0.2 at 7B), gamma ones, beta zeros (jiachenzhu/DyT ``convert_ln_to_dyt``; the
layer is :class:`~layernorm_methods.norms.DynamicTanh`). Everything else is initialised as
``init_style`` says.
"""

from layernorm_methods.norms import LAYER_NORM_NAMES, STACK_NORM_NAMES, DynamicTanh, norm_dim, replace_norms_
from layernorm_methods.registry import register

DYT_ALPHA_INIT = 0.5  # Zhu et al. 2025 and jiachenzhu/DyT: the default outside their LLaMA models


def dyt(cfg):
    """A function making the DyT layer that replaces a given normalisation layer."""
    alpha = getattr(cfg, "dyt_alpha_init", None)
    return lambda norm: DynamicTanh(norm_dim(norm), DYT_ALPHA_INIT if alpha is None else alpha)


class DyTLayerMixin:
    """Every LayerNorm of the layer, and the stack's final one, a :class:`DynamicTanh`."""

    def method_init_(self, cfg, stack):
        super().method_init_(cfg, stack)
        replace_norms_(self, LAYER_NORM_NAMES, dyt(cfg))

    @classmethod
    def init_stack_(cls, stack_module, cfg, stack):
        super().init_stack_(stack_module, cfg, stack)
        replace_norms_(stack_module, STACK_NORM_NAMES, dyt(cfg))


def dyt_defaults(args):
    """DyT (Zhu et al. 2025): Pre-LN with every LayerNorm a Dynamic Tanh."""
    args.dyt_alpha_init = getattr(args, "dyt_alpha_init", None)


METHOD = register("dyt", DyTLayerMixin, dyt_defaults, normalize_before=True)
