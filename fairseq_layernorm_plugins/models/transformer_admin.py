"""Admin (Liu et al. 2020) as fairseq models: ``transformer_admin``, ``transformer_lm_admin``
and ``s2t_transformer_admin``, whose layers mix in the core's
:class:`~layernorm_methods.methods.admin.AdminLayerMixin` (the formulas and the
``--admin-init`` choices are described there). ``--admin-init profile`` (the default) profiles
omega inside ``fairseq-train`` (:mod:`fairseq_layernorm_plugins.admin_profiling`, on the core's
rule, :mod:`layernorm_methods.admin`); the ``--admin-profile-*`` options set how.
"""

from fairseq.models import register_model

from fairseq_layernorm_plugins.admin_profiling import require_trainer_hook
from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer
from layernorm_methods.admin import admin_layers
from layernorm_methods.methods.admin import (
    ADMIN_INITS,
    ADMIN_PROFILE_PRECISIONS,
    AdminLayerMixin,
)
from layernorm_methods.methods.admin import METHOD as CORE


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


ARCHS = register_arch_family("transformer_admin", CORE)
LM_ARCHS = register_lm_arch_family("transformer_lm_admin", CORE)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_admin", CORE)
METHOD = register_method(
    "admin",
    "transformer_admin",
    "Admin",
    "Liu et al. 2020",
    order=2,
    lm_model="transformer_lm_admin",
    s2t_model="s2t_transformer_admin",
)
