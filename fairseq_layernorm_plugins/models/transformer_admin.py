"""Admin (Liu et al. 2020, "Understanding the Difficulty of Training Transformers"):
Post-LN with a per-sub-layer vector omega on the residual (Sec. 4.3, Eq. 5):

    x_i = LN(x_{i-1} * omega_i + f_i(x_{i-1}))

(encoder: self-attn, FFN; decoder: self-attn, cross-attn, FFN). omega is a trainable
(num_sublayers, d) parameter of each layer, saved in checkpoints. ``--admin-init``:

* ``profile`` (default, the paper): profile on real training batches with omega = 1,
  then, per stack, as the authors' code does: omega_1 = 1 and
  omega_{i+1} = sqrt(Var(x_i * omega_i) + Var(f_i)), with x_i / f_i the input and
  (dropout-applied) branch output of sub-layer i and Var one scalar over the whole
  tensor (padding included, as the authors' code; ``--admin-profile-mask-padding``
  excludes padded positions, a deviation). Profiling runs inside ``fairseq-train``,
  just before fairseq's Trainer is built (see :mod:`fairseq_layernorm_plugins.admin_profiling`).
* ``closed-logn`` / ``closed-n`` / ``closed-1``: the authors' later admin-torch closed
  forms, one omega = sqrt(v) per stack for an O(log n) / O(n) / O(1) output change,
  n = number of residual sub-layers of the stack (2 N_e or 3 N_d).
* ``none``: omega = 1 (plain Post-LN with the omega parameters, for ablations).
"""
import math

import torch
import torch.nn as nn
from fairseq.models import register_model
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from fairseq_layernorm_plugins.models.base import POST_LN_ONLY, PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.modules import SublayerResidualMixin

ADMIN_INITS = ("profile", "closed-logn", "closed-n", "closed-1", "none")


def admin_closed_form_omega(num_sublayers, scale):
    """sqrt(v): v = (n+1)/ln(n+1) - 1 for O(log n), 1 for O(n), n for O(1) (admin-torch)."""
    v = {"closed-logn": (num_sublayers + 1) / math.log(num_sublayers + 1) - 1, "closed-n": 1.0, "closed-1": num_sublayers}
    return math.sqrt(v[scale])


def admin_profiled_omegas(input_vars, branch_vars):
    """omega_1 = 1, omega_{i+1} = sqrt(omega_i^2 Var(x_i) + Var(f_i)) over one stack's
    sub-layers in order (Liu et al. 2020, Sec. 4.3; the authors' Transformer-Clinic code).
    Returns one scalar per sub-layer."""
    omegas, omega = [], 1.0
    for var_x, var_f in zip(input_vars, branch_vars):
        omegas.append(omega)
        omega = math.sqrt(omega**2 * var_x + var_f)
    return omegas


class AdminLayerMixin(SublayerResidualMixin):
    """x_i = LN(x_{i-1} * omega_i + f_i): ``omega`` (num_sublayers, C)."""

    def admin_init_(self, embed_dim):
        self.omega = nn.Parameter(torch.ones(self.num_sublayers, embed_dim))
        self.profile_stats = None  # a list while profiling: (Var(x_i), Var(f_i)) per sub-layer
        self.profile_mask_padding = False
        self.profile_mask = None  # (T, B, 1) bool of real tokens, when padding is excluded

    def set_profile_mask(self, padding_mask):
        """padding_mask: (B, T) True at padding, or None."""
        masking = self.profile_stats is not None and self.profile_mask_padding and padding_mask is not None
        self.profile_mask = ~padding_mask.t().unsqueeze(-1) if masking else None

    def combine(self, x, residual, sublayer):
        if self.profile_stats is not None:
            self.profile_stats.append((self._variance(residual), self._variance(x)))
        return residual * self.omega[sublayer - 1] + x

    def _variance(self, t):
        t = t.detach().float()
        if self.profile_mask is not None:
            t = t.masked_select(self.profile_mask.expand_as(t))
        return t.var(unbiased=False).item()  # np.var over the whole tensor, as the authors


class AdminEncoderLayer(AdminLayerMixin, TransformerEncoderLayerBase):
    def __init__(self, cfg, return_fc=False):
        super().__init__(cfg, return_fc=return_fc)
        self.admin_init_(cfg.encoder.embed_dim)

    def forward(self, x, encoder_padding_mask=None, attn_mask=None):
        self.set_profile_mask(encoder_padding_mask)
        return super().forward(x, encoder_padding_mask, attn_mask)


class AdminDecoderLayer(AdminLayerMixin, TransformerDecoderLayerBase):
    def __init__(self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False):
        super().__init__(cfg, no_encoder_attn, add_bias_kv, add_zero_attn)
        self.admin_init_(cfg.decoder.embed_dim)

    def forward(self, x, *args, self_attn_padding_mask=None, **kwargs):
        self.set_profile_mask(self_attn_padding_mask)
        return super().forward(x, *args, self_attn_padding_mask=self_attn_padding_mask, **kwargs)


@register_model("transformer_admin")
class TransformerAdminModel(PluginTransformerModel):
    """Post-LN encoder-decoder Transformer with Admin's residual scaling omega."""

    encoder_layer_cls = AdminEncoderLayer
    decoder_layer_cls = AdminDecoderLayer
    incompatible_flags = POST_LN_ONLY

    @staticmethod
    def add_args(parser):
        PluginTransformerModel.add_args(parser)
        parser.add_argument("--admin-init", choices=ADMIN_INITS,
                            help="omega initialisation: profile (the paper), closed-logn/-n/-1 (admin-torch), none (omega = 1)")
        parser.add_argument("--admin-profile-batches", type=int,
                            help="training batches to profile, variances averaged (the paper: 1)")
        parser.add_argument("--admin-profile-mask-padding", action="store_true",
                            help="exclude padding positions from the profiled variances (the authors' code includes them)")
        parser.add_argument("--admin-profile-json", help="also write the profiled variances and omega to this JSON file")

    @classmethod
    def build_model(cls, args, task):
        model = super().build_model(args, task)
        if args.admin_init.startswith("closed-"):
            for stack in (model.encoder, model.decoder):
                n = sum(layer.num_sublayers for layer in stack.layers)
                with torch.no_grad():
                    for layer in stack.layers:
                        layer.omega.fill_(admin_closed_form_omega(n, args.admin_init))
        return model

    def admin_layers(self):
        return {"encoder": list(self.encoder.layers), "decoder": list(self.decoder.layers)}


def admin_defaults(args):
    """Admin (Liu et al. 2020): Post-LN with profiled residual scaling omega."""
    args.encoder_normalize_before = getattr(args, "encoder_normalize_before", False)
    args.decoder_normalize_before = getattr(args, "decoder_normalize_before", False)
    args.admin_init = getattr(args, "admin_init", "profile")
    args.admin_profile_batches = getattr(args, "admin_profile_batches", 1)
    args.admin_profile_mask_padding = getattr(args, "admin_profile_mask_padding", False)
    args.admin_profile_json = getattr(args, "admin_profile_json", None)


ARCHS = register_arch_family("transformer_admin", admin_defaults)
