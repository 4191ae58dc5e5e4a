"""Admin (Liu et al. 2020, "Understanding the Difficulty of Training Transformers"):
Post-LN with a per-sub-layer vector omega on the residual (Sec. 4.3, Eq. 5):

    x_i = LN(x_{i-1} * omega_i + f_i(x_{i-1}))

(encoder: self-attn, FFN; decoder: self-attn, cross-attn, FFN). omega is a trainable
(num_sublayers, d) parameter of each layer, saved in checkpoints. ``--admin-init``:

* ``profile`` (default, the paper): one training-mode forward pass (dropout on) over a
  real training batch, sequential within the pass as the authors' code
  (Transformer-Clinic) does: per stack a running ratio starts at 1.0; at each
  sub-layer i, in forward order, omega_i is set to the running ratio, the sub-layer
  output LN(x_{i-1} * omega_i + f_i) already uses it, and the ratio becomes
  sqrt(Var(x_{i-1} * omega_i) + Var(f_i)), so later sub-layers (and the decoder,
  through the encoder output) see the rescaled activations. Var is one scalar over
  the whole tensor (padding included, as the authors' code;
  ``--admin-profile-mask-padding`` excludes padded positions, a deviation). With
  ``--admin-profile-batches N`` each batch is profiled this way on its own and each
  omega is the mean of its N values (the paper uses one batch). Profiling runs inside
  ``fairseq-train``, just before fairseq's Trainer is built, with every layer run
  (LayerDrop off for the pass); see :mod:`fairseq_layernorm_plugins.admin_profiling`.
* ``closed-logn`` / ``closed-n`` / ``closed-1``: the authors' later admin-torch closed
  forms, one omega = sqrt(v) per stack for an O(log n) / O(n) / O(1) output change,
  n = number of residual sub-layers of the stack (2 N_e or 3 N_d).
* ``none``: omega = 1 (plain Post-LN with the omega parameters, for ablations).
"""
import math

import torch
import torch.nn as nn
from fairseq.models import register_model

from fairseq_layernorm_plugins.models.base import POST_LN_ONLY, PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer, SublayerResidualMixin, stack_layers

ADMIN_INITS = ("profile", "closed-logn", "closed-n", "closed-1", "none")


def admin_closed_form_omega(num_sublayers, scale):
    """sqrt(v): v = (n+1)/ln(n+1) - 1 for O(log n), 1 for O(n), n for O(1) (admin-torch)."""
    v = {"closed-logn": (num_sublayers + 1) / math.log(num_sublayers + 1) - 1, "closed-n": 1.0, "closed-1": num_sublayers}
    return math.sqrt(v[scale])


def admin_next_omega(var_scaled_input, var_branch):
    """The running ratio after sub-layer i, the next sub-layer's omega:
    sqrt(Var(x_{i-1} * omega_i) + Var(f_i)) (Liu et al. 2020, Sec. 4.3; Transformer-Clinic)."""
    return math.sqrt(var_scaled_input + var_branch)


class AdminProfile:
    """One stack's state during a sequential profiling pass: the running ratio (the next
    sub-layer's omega, 1.0 at the start) and one row per sub-layer in forward order:
    (layer, sub-layer index from 0, Var(x * omega), Var(f), omega)."""

    def __init__(self, mask_padding=False):
        self.ratio = 1.0
        self.rows = []
        self.mask_padding = mask_padding

    def record(self, layer, sublayer, var_scaled_input, var_branch):
        self.rows.append((layer, sublayer, var_scaled_input, var_branch, self.ratio))
        self.ratio = admin_next_omega(var_scaled_input, var_branch)


class AdminLayerMixin(SublayerResidualMixin):
    """x_i = LN(x_{i-1} * omega_i + f_i): ``omega`` (num_sublayers, C)."""

    def admin_init_(self, embed_dim):
        self.omega = nn.Parameter(torch.ones(self.num_sublayers, embed_dim))
        self.profile = None  # the stack's AdminProfile during a profiling pass
        self.profile_mask = None  # (T, B, 1) bool of real tokens, when padding is excluded

    def set_profile_mask(self, padding_mask):
        """padding_mask: (B, T) True at padding, or None."""
        masking = self.profile is not None and self.profile.mask_padding and padding_mask is not None
        self.profile_mask = ~padding_mask.t().unsqueeze(-1) if masking else None

    def combine(self, x, residual, sublayer):
        """x: the branch output f_i (T, B, C); residual: x_{i-1} (T, B, C)."""
        if self.profile is not None:  # omega_i <- the running ratio, used at once (sequential profiling)
            self.omega.data[sublayer - 1].fill_(self.profile.ratio)
            scaled = residual * self.omega[sublayer - 1]
            self.profile.record(self, sublayer - 1, self._variance(scaled), self._variance(x))
            return scaled + x
        return residual * self.omega[sublayer - 1] + x

    def _variance(self, t):
        t = t.detach().float()
        if self.profile_mask is not None:
            t = t.masked_select(self.profile_mask.expand_as(t))
        return t.var(unbiased=False).item()  # np.var over the whole tensor, as the authors


class AdminEncoderLayer(AdminLayerMixin, PluginEncoderLayer):
    def __init__(self, cfg, return_fc=False):
        super().__init__(cfg, return_fc=return_fc)
        self.admin_init_(cfg.encoder.embed_dim)

    def forward(self, x, encoder_padding_mask=None, attn_mask=None):
        self.set_profile_mask(encoder_padding_mask)
        return super().forward(x, encoder_padding_mask, attn_mask)


class AdminDecoderLayer(AdminLayerMixin, PluginDecoderLayer):
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
            for layers in model.admin_layers().values():
                n = sum(layer.num_sublayers for layer in layers)
                with torch.no_grad():
                    for layer in layers:
                        layer.omega.fill_(admin_closed_form_omega(n, args.admin_init))
        return model

    def admin_layers(self):
        """{"encoder" | "decoder": every layer of the stack, LayerDrop or not}."""
        return {"encoder": stack_layers(self.encoder), "decoder": stack_layers(self.decoder)}


def admin_defaults(args):
    """Admin (Liu et al. 2020): Post-LN with profiled residual scaling omega."""
    args.encoder_normalize_before = getattr(args, "encoder_normalize_before", False)
    args.decoder_normalize_before = getattr(args, "decoder_normalize_before", False)
    args.admin_init = getattr(args, "admin_init", "profile")
    args.admin_profile_batches = getattr(args, "admin_profile_batches", 1)
    args.admin_profile_mask_padding = getattr(args, "admin_profile_mask_padding", False)
    args.admin_profile_json = getattr(args, "admin_profile_json", None)


ARCHS = register_arch_family("transformer_admin", admin_defaults)
