"""Post-LN (Vaswani et al. 2017), the baseline of every paper here: x_i = LN(x_{i-1} + f_i(x_{i-1}))
in every sub-layer of every stack, no LayerNorm before the output: the base layers as they are."""

from layernorm_methods.registry import register


class PostLNLayerMixin:
    """Nothing beyond the base layer: its residual sum, then its LayerNorm."""


def postln_defaults(args):
    """Post-LN (Vaswani et al. 2017): LayerNorm after each residual sum."""


METHOD = register("postln", PostLNLayerMixin, postln_defaults, normalize_before=False)
