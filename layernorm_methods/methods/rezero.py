"""ReZero (Bachlechner et al. 2020, "ReZero is All You Need: Fast Convergence at Large
Depth"): no normalisation anywhere, and each layer's branches scaled by one learnable
scalar that starts at 0,

    x_i = x_{i-1} + alpha * f_i(x_{i-1}),   alpha = 0 at initialisation,

one alpha per layer shared by its sub-layers (the authors' code, majumderb/rezero, and
Transformer-Clinic's ``--init-type rezero``: ``rezero_weight``, IWSLT14 34.66); no final
LayerNorm (Post-LN placement, every LayerNorm removed) and none on the embedding
(``layernorm_embedding`` False). Everything else is initialised as ``init_style`` says.
"""

import torch
from torch import Tensor, nn

from layernorm_methods.registry import register
from layernorm_methods.residual import remove_layer_norms


class ReZeroLayerMixin:
    """x + alpha * f; ``rezero_alpha`` (1,), zero at initialisation."""

    def method_init_(self, cfg, stack):
        super().method_init_(cfg, stack)
        remove_layer_norms(self)
        self.rezero_alpha = nn.Parameter(torch.zeros(1))

    def residual_connection(self, x: Tensor, residual: Tensor) -> Tensor:
        """x: the branch output f (T, B, C), residual: the sub-layer input (T, B, C)."""
        return residual + self.rezero_alpha * x  # Bachlechner et al. 2020: x + alpha F(x)


def rezero_defaults(args):
    """ReZero (Bachlechner et al. 2020): x + alpha f(x), alpha = 0 at first, no LayerNorm."""
    args.layernorm_embedding = getattr(args, "layernorm_embedding", False)


NO_LAYER_NORM = {"layernorm_embedding": "ReZero has no LayerNorm"}
METHOD = register("rezero", ReZeroLayerMixin, rezero_defaults, normalize_before=False, refuses=NO_LAYER_NORM)
