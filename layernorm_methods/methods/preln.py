"""Pre-LN (Xiong et al. 2020): x_i = x_{i-1} + f_i(LN(x_{i-1})) in every sub-layer, plus a final
LayerNorm on top of each stack (paper Fig. 1 (b)): the base layers with ``normalize_before``."""

from layernorm_methods.registry import register


class PreLNLayerMixin:
    """Nothing beyond the base layer: its LayerNorm, then the sub-layer, then the residual sum."""


def preln_defaults(args):
    """Pre-LN (Xiong et al. 2020): LayerNorm before each sub-layer, final LayerNorms."""


METHOD = register("preln", PreLNLayerMixin, preln_defaults, normalize_before=True)
