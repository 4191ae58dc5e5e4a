"""The shared base of every method: fairseq's models with pluggable stacks.

A method module writes its layer mixin over ``PluginEncoderLayer`` / ``PluginDecoderLayer``
(``modules/layers.py``), subclasses :class:`PluginTransformerModel` naming its layers as
``encoder_layer_cls`` / ``decoder_layer_cls`` (and ``PluginTransformerLanguageModel`` for a
decoder-only model, ``base_lm.py``), and calls :func:`register_arch_family` once to register
its architecture and size variants.
"""

import argparse
import contextlib
import copy

from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY
from fairseq.models.transformer import TransformerConfig, TransformerModel
from fairseq.models.transformer import transformer_legacy as fairseq_archs
from omegaconf import OmegaConf

from fairseq_layernorm_plugins import _compat
from fairseq_layernorm_plugins.models.family import (
    POST_LN_ONLY,
    ArchFamily,
    plugin_architecture,
    register_family,
    registered_name,
)
from fairseq_layernorm_plugins.modules import (
    INIT_STYLES,
    PluginDecoderLayer,
    PluginEncoderLayer,
    PluginTransformerDecoder,
    PluginTransformerEncoder,
)
from fairseq_layernorm_plugins.modules.word_dropout import add_word_dropout_args, install_word_dropout
from layernorm_methods.norms import NORM_TYPES

__all__ = [
    "ARCH_FAMILIES",
    "ARCH_SIZES",
    "POST_LN_ONLY",
    "PluginModelMixin",
    "PluginTransformerModel",
    "register_arch_family",
    "swapped",
]


@contextlib.contextmanager
def swapped(module, **names):
    """For one build, each of ``names`` in ``module`` is the given object: fairseq's
    ``build_model`` of its language and speech models builds its stacks by module-level
    name (``transformer_lm.TransformerDecoder(...)``, ``S2TTransformerEncoder(args)``) and has
    no hook for another class."""
    originals = {name: getattr(module, name) for name in names}
    for name, value in names.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in originals.items():
            setattr(module, name, value)


class PluginModelMixin:
    """What every plugin model adds to its fairseq model, whatever its kind: the plugin's
    options, the method's options and defaults, refused flags and fairseq patches."""

    decoder_layer_cls = PluginDecoderLayer
    # command-line flags the method cannot honour: {arg name: why}
    incompatible_flags = {}
    families = {}  # {model name: ArchFamily} of this model kind
    scriptable = True  # False: torch.jit.script refuses the model in one line (its __prepare_scriptable__)
    base_size = None  # fairseq's size function of this model kind's base architecture

    @staticmethod
    def add_plugin_args(parser):
        parser.add_argument(
            "--init-style",
            choices=INIT_STYLES,
            help="paper: fairseq 0.8/0.9's initialisation, which every paper's numbers come from (fc1/fc2 "
            "Xavier-uniform with zero bias, attention q/k/v biases zero); fairseq: fairseq 0.12's, as its "
            "stock transformer (nn.Linear defaults), which the B2T authors' fork also builds. Default: the "
            "method's authors' own (fairseq for transformer_b2t, paper for the others)",
        )
        parser.add_argument(
            "--norm-type",
            choices=NORM_TYPES,
            help="layernorm (default): fairseq's LayerNorm; rmsnorm: torch's RMSNorm (Zhang and Sennrich 2019) "
            "in its place, in every layer and stack of a method that has normalisation layers",
        )
        parser.add_argument(
            "--fused-attention",
            action="store_true",
            help="run encoder-decoder attention outside incremental decoding on PyTorch's fused "
            "scaled_dot_product_attention path, as fairseq already runs self-attention (same results "
            "within float rounding; modules/attention.py)",
        )

    @staticmethod
    def add_method_args(parser):
        """Hook: the method's own command-line options; none by default."""

    @classmethod
    def plugin_args(cls, args):
        """``args`` ready for fairseq's ``build_model``: a plain Namespace with the method's
        defaults and what it derives from them; refused flags refused; the plugin's fairseq
        patches applied (they apply to the plugin's archs only, see ``_compat``)."""
        if OmegaConf.is_config(args):
            # fairseq-hydra-train passes a DictConfig, from which fairseq's TransformerConfig
            # keeps only its own fields: the method's options would be silently dropped
            args = argparse.Namespace(**OmegaConf.to_container(args, resolve=True))
        cls.architecture_defaults(args)
        cls.method_args(args)
        for flag, why in cls.forbidden_flags().items():
            if getattr(args, flag, False):
                raise ValueError(f"{args.arch}: drop --{flag.replace('_', '-')} ({why})")
        for patch in ("keep_last_batch", "resume_batches", "patience_resume", "wall_resume", "resume_finished"):
            _compat.apply(patch)
        return args

    @classmethod
    def forbidden_flags(cls):
        """{arg name: why}: the method's :attr:`incompatible_flags`, and what its family's
        placement refuses (``ArchFamily.forbidden_flags``)."""
        family = cls.families.get(registered_name(cls, cls.families))
        return {**(family.forbidden_flags if family is not None else {}), **cls.incompatible_flags}

    @classmethod
    def method_args(cls, args):
        """Hook: what a method derives from the complete ``args`` (a plain Namespace, every
        default filled in) before fairseq's ``build_model`` runs; nothing by default."""

    @classmethod
    def architecture_defaults(cls, args):
        """Fill in what ``args`` lacks with the method's defaults, as fairseq's own
        ``TransformerModel.build_model`` calls ``base_architecture(args)``: the function of
        ``args.arch`` when it is one of this model's architectures, else of the method's base
        architecture. Args no architecture function has seen (``Model.build_model(args, task)``
        from a parser or a notebook) then build the method's model, not fairseq's Post-LN
        transformer; values already in ``args`` win, so args from the command line or a
        checkpoint are left as they are."""
        model_name = registered_name(cls, cls.families)
        arch = getattr(args, "arch", None)
        if model_name is None:  # not a registered method: the plugin's own defaults at base size
            plugin_architecture(args, ArchFamily(lambda args: None), cls.base_size)
        elif ARCH_MODEL_NAME_REGISTRY.get(arch) == model_name:
            ARCH_CONFIG_REGISTRY[arch](args)
        else:
            ARCH_CONFIG_REGISTRY[model_name](args)

    def prepare_for_inference_(self, cfg):
        """fairseq's preparation, then the cast that ``--bf16`` asks for: fairseq-generate,
        -interactive and -eval-lm cast the model to half for ``--fp16`` only, so with ``--bf16``
        they would decode in fp32 (``_compat`` patch ``bf16_decoding``). Only a decoding
        tool's configuration (``--path`` set) casts: ``from_pretrained`` passes the
        checkpoint's training configuration, and its model stays as loaded."""
        super().prepare_for_inference_(cfg)
        common, path = getattr(cfg, "common", None), getattr(getattr(cfg, "common_eval", None), "path", None)
        if getattr(common, "bf16", False) and path and _compat.patch_enabled("bf16_decoding"):
            self.bfloat16()

    def __prepare_scriptable__(self):
        """``torch.jit.script(model)`` scripts a deep copy, so the scripted model holds its own
        parameters: TorchScript prepares submodules in place, and layers that number their
        sub-layers drop an eager-only pre-hook when scripted (``layernorm_methods/residual.py``); the
        model the user scripted keeps it."""
        return copy.deepcopy(self)


def _deep(args):
    # The deep setting of Admin (Liu et al. 2020, Table 2) and B2T (Takase et al. 2023,
    # Table 1): base dimensions, 18L-18L; any depth via --encoder-layers/--decoder-layers.
    args.encoder_layers = getattr(args, "encoder_layers", 18)
    args.decoder_layers = getattr(args, "decoder_layers", 18)
    fairseq_archs.transformer_wmt_en_de(args)


# suffix -> fairseq arch function that fills in the size defaults
ARCH_SIZES = {
    "": fairseq_archs.base_architecture,  # Transformer base, 6L-6L, d=512
    "_iwslt_de_en": fairseq_archs.transformer_iwslt_de_en,  # d=512, ffn 1024, 4 heads
    "_wmt_en_de": fairseq_archs.transformer_wmt_en_de,  # Transformer base
    "_wmt_en_de_big": fairseq_archs.transformer_wmt_en_de_big,  # Transformer big
    "_wmt_en_de_deep": _deep,  # Transformer base at 18L-18L by default
}

# model name -> its ArchFamily (what its archs set beyond fairseq's): the encoder-decoders
ARCH_FAMILIES = {}


class PluginTransformerModel(PluginModelMixin, TransformerModel):
    """fairseq's legacy ``TransformerModel`` (same args, checkpoints, generation) whose
    encoder and decoder layers are :attr:`encoder_layer_cls` and :attr:`decoder_layer_cls`."""

    encoder_layer_cls = PluginEncoderLayer
    # the stacks; a method whose stacks run their layers their own way (DLCL) names its subclasses
    encoder_cls = PluginTransformerEncoder
    decoder_cls = PluginTransformerDecoder
    families = ARCH_FAMILIES
    base_size = staticmethod(fairseq_archs.base_architecture)

    @classmethod
    def add_args(cls, parser):
        TransformerModel.add_args(parser)
        cls.add_plugin_args(parser)
        add_word_dropout_args(parser)  # --enc/dec-replace-rate (the B2T fork's worddrop), every arch
        cls.add_method_args(parser)

    @classmethod
    def build_model(cls, args, task):
        args = cls.plugin_args(args)
        return install_word_dropout(super().build_model(args, task), args)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return cls.encoder_cls(cfg, src_dict, embed_tokens, layer_cls=cls.encoder_layer_cls)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return cls.decoder_cls(
            cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention, layer_cls=cls.decoder_layer_cls
        )


def register_arch_family(model_name, method_defaults, normalize_before=None):
    """Register ``model_name`` + each suffix of :data:`ARCH_SIZES` as architectures.

    ``method_defaults``: the core's method (``layernorm_methods/methods/<name>.py``: its
    defaults and placement), or a defaults function with ``normalize_before`` (a method of the
    plugin alone). Each architecture function applies the method's :class:`ArchFamily`
    (``normalize_before``: False for a Post-LN method, True for Pre-LN; ``method_defaults(args)``:
    its own settings, written as ``args.x = getattr(args, "x", default)`` so command-line flags win) and then
    chains to fairseq's architecture function for that size. Returns ``{arch_name: arch_function}``.
    """
    return register_family(ARCH_FAMILIES, ARCH_SIZES, model_name, method_defaults, normalize_before)
