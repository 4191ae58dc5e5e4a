"""Admin (Liu et al. 2020, "Understanding the Difficulty of Training Transformers"):
Post-LN with a per-sub-layer vector omega on the residual (Sec. 4.3, Eq. 5):

    x_i = LN(x_{i-1} * omega_i + f_i(x_{i-1}))

(encoder and language model: self-attn, FFN; decoder: self-attn, cross-attn, FFN). omega is a trainable
(num_sublayers, d) parameter of each layer, saved in checkpoints. ``admin_init`` (``--admin-init``):

* ``profile`` (default, the paper): one training-mode forward pass (dropout on) over a
  real training batch, sequential within the pass as the authors' code
  (Transformer-Clinic) does: per stack a running ratio starts at 1.0; at each
  sub-layer i, in forward order, omega_i is set to the running ratio, the sub-layer
  output LN(x_{i-1} * omega_i + f_i) already uses it, and the ratio becomes
  sqrt(Var(x_{i-1} * omega_i) + Var(f_i)), so later sub-layers (and the decoder,
  through the encoder output) see the rescaled activations. Var is one scalar over
  the whole tensor (padding included, as the authors' code;
  ``admin_profile_mask_padding`` excludes padded positions, a deviation). With
  ``admin_profile_batches`` N each batch is profiled this way on its own and each
  omega is the mean of its N values (the paper uses one batch). The layers are built with
  omega = 1; :func:`layernorm_methods.admin.profile_admin_` profiles any model of these layers
  (the fairseq plugin runs it inside ``fairseq-train``, just before fairseq's Trainer is built,
  :mod:`fairseq_layernorm_plugins.admin_profiling`). ``admin_profile_precision`` fp16 / bf16
  profiles a half copy of the model, as the authors' profiling run did under ``--fp16``
  (default fp32: omega independent of the training precision; docs/mixed_precision.md gives
  the difference).
* ``closed-logn`` / ``closed-n`` / ``closed-1``: the authors' later admin-torch closed
  forms, one omega = sqrt(v) per stack for an O(log n) / O(n) / O(1) output change,
  n = number of residual sub-layers of the stack (2 N_e or 3 N_d; 2 M in a language
  model, as admin-torch's ``num_res_layers`` of an M-layer stack without cross-attention),
  set when the stack is built.
* ``none``: omega = 1 (plain Post-LN with the omega parameters, for ablations).
"""

import math

import torch
from torch import Tensor, nn

from layernorm_methods.layers import stack_layers
from layernorm_methods.registry import register
from layernorm_methods.residual import SublayerResidualMixin

ADMIN_INITS = ("profile", "closed-logn", "closed-n", "closed-1", "none")
ADMIN_PROFILE_PRECISIONS = ("fp32", "fp16", "bf16")


def admin_closed_form_omega(num_sublayers, scale):
    """sqrt(v): v = (n+1)/ln(n+1) - 1 for O(log n), 1 for O(n), n for O(1) (admin-torch)."""
    v = {
        "closed-logn": (num_sublayers + 1) / math.log(num_sublayers + 1) - 1,
        "closed-n": 1.0,
        "closed-1": num_sublayers,
    }
    return math.sqrt(v[scale])


class AdminLayerMixin(SublayerResidualMixin):
    """x_i = LN(x_{i-1} * omega_i + f_i): ``omega`` (num_sublayers, C)."""

    def method_init_(self, cfg, stack):
        super().method_init_(cfg, stack)
        self.omega = nn.Parameter(torch.ones(self.num_sublayers, stack.embed_dim))
        self.profile = None  # the stack's AdminProfile during a profiling pass (layernorm_methods/admin.py)

    @classmethod
    def init_stack_(cls, stack_module, cfg, stack):
        """``admin_init`` ``closed-*``: one omega for the whole stack, from its sub-layer count."""
        super().init_stack_(stack_module, cfg, stack)
        init = getattr(cfg, "admin_init", None) or "profile"
        if init not in ADMIN_INITS:
            raise ValueError(f"admin_init must be one of {', '.join(ADMIN_INITS)}, not {init!r}")
        if init.startswith("closed-"):
            layers = stack_layers(stack_module)
            omega = admin_closed_form_omega(sum(layer.num_sublayers for layer in layers), init)
            with torch.no_grad():
                for layer in layers:
                    layer.omega.fill_(omega)

    def combine(self, x: Tensor, residual: Tensor, sublayer: int) -> Tensor:
        """x: the branch output f_i (T, B, C); residual: x_{i-1} (T, B, C)."""
        if self.profile is not None:
            return self.profile_combine(x, residual, sublayer)
        return residual * self.omega[sublayer - 1] + x  # Liu et al. 2020, Eq. 5

    @torch.jit.unused
    def profile_combine(self, x: Tensor, residual: Tensor, sublayer: int) -> Tensor:
        """Sequential profiling: omega_i <- the running ratio, used at once."""
        self.omega.data[sublayer - 1].fill_(self.profile.ratio)
        scaled = residual * self.omega[sublayer - 1]
        self.profile.step(self, sublayer - 1, scaled, x)
        return scaled + x


def admin_defaults(args):
    """Admin (Liu et al. 2020): Post-LN with profiled residual scaling omega."""
    args.admin_init = getattr(args, "admin_init", "profile")
    args.admin_profile_batches = getattr(args, "admin_profile_batches", 1)
    args.admin_profile_mask_padding = getattr(args, "admin_profile_mask_padding", False)
    args.admin_profile_json = getattr(args, "admin_profile_json", None)
    args.admin_profile_precision = getattr(args, "admin_profile_precision", "fp32")
    args.admin_profile_from = getattr(args, "admin_profile_from", None)


METHOD = register("admin", AdminLayerMixin, admin_defaults, normalize_before=False)
