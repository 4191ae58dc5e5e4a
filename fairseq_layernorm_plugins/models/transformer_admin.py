"""Admin (Liu et al. 2020, "Understanding the Difficulty of Training Transformers"):
Post-LN with a per-sub-layer vector omega on the residual (Sec. 4.3, Eq. 5):

    x_i = LN(x_{i-1} * omega_i + f_i(x_{i-1}))

(encoder and language model: self-attn, FFN; decoder: self-attn, cross-attn, FFN). omega is a trainable
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
  ``--admin-profile-precision fp16`` profiles a half copy of the model, as the authors'
  profiling run did under ``--fp16`` (default fp32: omega independent of the training
  precision; docs/mixed_precision.md gives the difference).
* ``closed-logn`` / ``closed-n`` / ``closed-1``: the authors' later admin-torch closed
  forms, one omega = sqrt(v) per stack for an O(log n) / O(n) / O(1) output change,
  n = number of residual sub-layers of the stack (2 N_e or 3 N_d; 2 M in a language
  model, as admin-torch's ``num_res_layers`` of an M-layer stack without cross-attention).
* ``none``: omega = 1 (plain Post-LN with the omega parameters, for ablations).
"""

import math

import torch
import torch.nn as nn
from fairseq.models import register_model
from torch import Tensor

from fairseq_layernorm_plugins.admin_profiling import admin_layers, require_trainer_hook
from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import (
    PluginDecoderLayer,
    PluginEncoderLayer,
    SublayerResidualMixin,
    stack_layers,
)

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
        self.profile = None  # the stack's AdminProfile during a profiling pass (admin_profiling.py)

    @classmethod
    def init_stack_(cls, stack_module, cfg, stack):
        """``--admin-init closed-*``: one omega for the whole stack, from its sub-layer count."""
        super().init_stack_(stack_module, cfg, stack)
        init = getattr(cfg, "admin_init", None) or "profile"
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


class AdminEncoderLayer(AdminLayerMixin, PluginEncoderLayer):
    """Admin's encoder layer: omega (2, C)."""


class AdminDecoderLayer(AdminLayerMixin, PluginDecoderLayer):
    """Admin's decoder layer: omega (3, C), or (2, C) without encoder attention."""


class AdminModel:
    """What Admin adds to a model of any kind (mix in before the plugin's model class)."""

    @staticmethod
    def add_method_args(parser):
        parser.add_argument(
            "--admin-init",
            choices=ADMIN_INITS,
            help="omega initialisation: profile (the paper), closed-logn/-n/-1 (admin-torch), none (omega = 1)",
        )
        parser.add_argument(
            "--admin-profile-batches", type=int, help="training batches to profile, variances averaged (the paper: 1)"
        )
        parser.add_argument(
            "--admin-profile-mask-padding",
            action="store_true",
            help="exclude padding positions from the profiled variances (the authors' code includes them)",
        )
        parser.add_argument(
            "--admin-profile-json", help="also write the profiled variances and omega to this JSON file"
        )
        parser.add_argument(
            "--admin-profile-from",
            metavar="JSON",
            help="take omega from another run's --admin-profile-json instead of profiling (the authors "
            "profile once, seed 1111, and train every seed of a setting from that profile)",
        )
        parser.add_argument(
            "--admin-profile-precision",
            choices=ADMIN_PROFILE_PRECISIONS,
            help="precision of the profiling pass: fp32 (default: the same omega whatever the training "
            "precision), or fp16 / bf16 (a half copy of the model, as the authors' scripts profile inside an "
            "--fp16 run); omega is then set in the fp32 model, which fairseq converts as usual",
        )

    @classmethod
    def method_args(cls, args):
        if args.admin_init == "profile":
            require_trainer_hook()  # profiling runs as fairseq-train builds its Trainer, after this

    def upgrade_state_dict_named(self, state_dict, name):
        """A checkpoint without omega (a Post-LN model's) keeps this model's omega: the
        profiled one when training starts from it, 1 (plain Post-LN) otherwise."""
        super().upgrade_state_dict_named(state_dict, name)
        prefix = f"{name}." if name else ""
        # the layers' own names: a speech encoder's are transformer_layers.i
        names = {id(module): module_name for module_name, module in self.named_modules()}
        for layers in self.admin_layers().values():
            for layer in layers:
                state_dict.setdefault(f"{prefix}{names[id(layer)]}.omega", layer.omega.detach().clone())

    def admin_layers(self):
        """{"encoder" | "decoder": every layer of the stack, LayerDrop or not}."""
        return admin_layers(self)


@register_model("transformer_admin")
class TransformerAdminModel(AdminModel, PluginTransformerModel):
    """Post-LN encoder-decoder Transformer with Admin's residual scaling omega."""

    encoder_layer_cls = AdminEncoderLayer
    decoder_layer_cls = AdminDecoderLayer


@register_model("transformer_lm_admin")
class TransformerAdminLanguageModel(AdminModel, PluginTransformerLanguageModel):
    """Post-LN decoder-only language model with Admin's omega, profiled on its first training batch."""

    decoder_layer_cls = AdminDecoderLayer


@register_model("s2t_transformer_admin")
class S2TAdminModel(AdminModel, PluginS2TTransformerModel):
    """Post-LN speech-to-text Transformer with Admin's residual scaling omega."""

    encoder_layer_cls = AdminEncoderLayer
    decoder_layer_cls = AdminDecoderLayer
    incompatible_flags = {
        "admin_profile_mask_padding": "a speech encoder's padding is in its subsampled frames, which profiling does not mask",
        "load_pretrained_encoder_from": "fairseq loads that encoder strictly after Admin has profiled: its omega would "
        "be missing, or profiled over",
    }


def admin_defaults(args):
    """Admin (Liu et al. 2020): Post-LN with profiled residual scaling omega."""
    args.admin_init = getattr(args, "admin_init", "profile")
    args.admin_profile_batches = getattr(args, "admin_profile_batches", 1)
    args.admin_profile_mask_padding = getattr(args, "admin_profile_mask_padding", False)
    args.admin_profile_json = getattr(args, "admin_profile_json", None)
    args.admin_profile_precision = getattr(args, "admin_profile_precision", "fp32")
    args.admin_profile_from = getattr(args, "admin_profile_from", None)


ARCHS = register_arch_family("transformer_admin", admin_defaults, normalize_before=False)
LM_ARCHS = register_lm_arch_family("transformer_lm_admin", admin_defaults, normalize_before=False)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_admin", admin_defaults, normalize_before=False)
METHOD = register_method(
    "admin",
    "transformer_admin",
    "Admin",
    "Liu et al. 2020",
    order=2,
    lm_model="transformer_lm_admin",
    s2t_model="s2t_transformer_admin",
)
