"""Mix-LN (Li et al. 2024, "Mix-LN: Unleashing the Power of Deeper Layers by Combining
Pre-LN and Post-LN"): the first k layers of a stack Post-LN, the layers above Pre-LN,

    layer l < k:   x_i = LN(x_{i-1} + f_i(x_{i-1}))          (Post-LN)
    layer l >= k:  x_i = x_{i-1} + f_i(LN(x_{i-1}))          (Pre-LN)

with Pre-LN's final LayerNorm on top of the stack and nothing between the two parts (the
authors' code, pixeli99/MixLN). ``mixln_post_layers`` k (``--mixln-post-layers``): default
floor(0.25 L) per stack of L layers, the authors' ratio (3 of 12 layers, 6 of 24); 0 is Pre-LN,
L Post-LN with a final norm.

The rule is the paper's ratio alpha = 0.25 of the layers Post-LN (Li et al. 2024), rounded
down; the authors' code takes the count itself, an integer (``POST_NUM`` in their scripts: 3
for their 12-layer models, 6 for their 24-layer ones, both exact quarters), so it never rounds a
fraction, and floor is this package's reading. Below 4 layers it gives 0 Post-LN layers: at 2
layers per stack (the Multi30k recipes' depth) Mix-LN *is* Pre-LN, the same modules and the same
logits for the same weights, and a model built so logs a warning naming the stack, its depth
and the rule (``mixln_post_layers`` 1 asks for one Post-LN layer there).
"""

import logging
import math

from layernorm_methods.layers import stack_layers
from layernorm_methods.registry import register

MIXLN_POST_RATIO = 0.25  # Li et al. 2024: alpha = 0.25 (the authors' scripts: 3 of 12, 6 of 24 layers)

logger = logging.getLogger(__name__)


def mixln_post_layers(num_layers, given=None):
    """The Post-LN layers at the bottom of a stack of ``num_layers``: ``given``, else floor(0.25 L)."""
    k = math.floor(MIXLN_POST_RATIO * num_layers) if given is None else given
    if not 0 <= k <= num_layers:
        raise ValueError(f"--mixln-post-layers must be between 0 and {num_layers}, not {k}")
    return k


def mixln_all_pre_ln_warning(kind, num_layers, given=None):
    """The warning for a stack of ``num_layers`` with no Post-LN layer: exactly Pre-LN."""
    why = (
        "--mixln-post-layers 0"
        if given is not None
        else f"floor({MIXLN_POST_RATIO} x {num_layers}) = 0 by Mix-LN's rule (the first floor(0.25 L) layers "
        "Post-LN, Li et al. 2024)"
    )
    return (
        f"Mix-LN {kind} of {num_layers} layers has no Post-LN layer ({why}): every layer is Pre-LN, so this "
        "stack is exactly Pre-LN (same modules, same outputs for the same weights)"
    )


class MixLNLayerMixin:
    """Each layer's placement is set per stack, once its index is known (``init_stack_``)."""

    @classmethod
    def init_stack_(cls, stack_module, cfg, stack):
        super().init_stack_(stack_module, cfg, stack)
        given = getattr(cfg, "mixln_post_layers", None)
        k = mixln_post_layers(stack.num_layers, given)
        if k == 0:
            logger.warning(mixln_all_pre_ln_warning(stack.kind, stack.num_layers, given))
        for index, layer in enumerate(stack_layers(stack_module)):
            layer.normalize_before = index >= k  # Li et al. 2024: Post-LN below layer k, Pre-LN above


def mixln_defaults(args):
    """Mix-LN (Li et al. 2024): Post-LN in the first floor(0.25 L) layers, Pre-LN above."""
    args.mixln_post_layers = getattr(args, "mixln_post_layers", None)


METHOD = register("mixln", MixLNLayerMixin, mixln_defaults, normalize_before=True)
