"""A method's architectures: its defaults (:class:`ArchFamily`) registered at every size of a
model kind (fairseq's translation sizes in ``base.py``, its language-model sizes in
``base_lm.py``), each architecture function chaining to fairseq's own for that size."""

from collections.abc import Callable
from dataclasses import dataclass

from fairseq.models import MODEL_REGISTRY, register_model_architecture

from layernorm_methods.registry import CoreMethod

NORM_PLACEMENT = ("encoder_normalize_before", "decoder_normalize_before")
POST_LN_ONLY = dict.fromkeys(NORM_PLACEMENT, "the method is Post-LN")


@dataclass(frozen=True)
class ArchFamily:
    """A method's architecture defaults: ``defaults(args)`` sets its own options (written as
    ``args.x = getattr(args, "x", default)``, so command-line flags win); ``normalize_before``
    is where its LayerNorms sit, stated once: False for the Post-LN family (``--encoder/decoder-
    normalize-before`` then refused), True for the Pre-LN family (with its final LayerNorms at
    every size unless ``--no-decoder-final-norm``, fairseq's own flag: its ``_wiki103`` LM size
    drops the decoder's, and so did the B2T authors' Pre-LN LM), None to leave fairseq's default.
    The placement is the method's whatever ``args`` already hold (:func:`placement`)."""

    defaults: Callable
    normalize_before: bool | None = None

    def __call__(self, args):
        """The method's settings, in place (what its architectures set beyond fairseq's)."""
        if self.normalize_before is not None:
            for name in NORM_PLACEMENT:
                setattr(args, name, placement(self, getattr(args, name, None)))
        if self.normalize_before:  # fairseq's _wiki103 LM size drops the final norm; the family keeps it
            args.no_decoder_final_norm = getattr(args, "no_decoder_final_norm", False)  # unless asked
        self.defaults(args)

    @property
    def forbidden_flags(self):
        """{arg name: why} the placement refuses."""
        return POST_LN_ONLY if self.normalize_before is False else {}

    @property
    def __doc__(self):
        return self.defaults.__doc__


def plugin_architecture(args, family, size_defaults):
    """What every plugin architecture sets, in place: the method's own defaults, then the
    plugin's options, then fairseq's defaults for the size; the LayerNorm placement is the
    family's (:func:`placement`) even where fairseq's size function forces its own (every
    ``transformer_lm_*`` sets ``decoder_normalize_before = True``)."""
    given = {name: getattr(args, name) for name in NORM_PLACEMENT if hasattr(args, name)}
    family(args)  # first: a method may set its authors' own init_style
    args.init_style = getattr(args, "init_style", "paper")
    args.fused_attention = getattr(args, "fused_attention", False)
    args.norm_type = getattr(args, "norm_type", "layernorm")
    size_defaults(args)
    if family.normalize_before is not None:
        for name in NORM_PLACEMENT:
            setattr(args, name, placement(family, given.get(name)))


def placement(family, given):
    """``encoder/decoder_normalize_before`` of a method whose family states it, given what
    ``args`` held (None: nothing). A Pre-LN method is Pre-LN whatever they held: no flag sets
    False (``--encoder-normalize-before`` only turns it on), so a False there is another
    architecture's default (fairseq's ``transformer``: args parsed for it, then the arch
    swapped), never the user's. A Post-LN method keeps a
    True it is given, which ``PluginModelMixin.plugin_args`` then refuses, naming the option
    and the arch (``ArchFamily.forbidden_flags``), rather than build Pre-LN under its name."""
    if family.normalize_before:
        return True
    return bool(given)


def registered_name(model_cls, families):
    """The name ``model_cls`` (or its nearest base class) is registered under in ``families``
    ({model name: ArchFamily}), or None."""
    for klass in model_cls.__mro__:
        for name in families:
            if MODEL_REGISTRY.get(name) is klass:
                return name
    return None


def defaults_and_placement(method, normalize_before=None):
    """(defaults function, LayerNorm placement) of ``method``: a core method
    (``layernorm_methods.registry.CoreMethod``: its own, stated once there), or a defaults
    function with ``normalize_before`` given (a method of the plugin alone)."""
    if isinstance(method, CoreMethod):
        return method.defaults, method.normalize_before
    return method, normalize_before


def register_family(families, sizes, model_name, method, normalize_before=None):
    """Register ``model_name`` + each suffix of ``sizes`` ({suffix: fairseq's size function})
    as architectures of the method's :class:`ArchFamily`, kept in ``families``; ``method`` as
    :func:`defaults_and_placement` takes it. Returns ``{arch_name: arch_function}``."""
    method_defaults, normalize_before = defaults_and_placement(method, normalize_before)
    family = families[model_name] = ArchFamily(method_defaults, normalize_before)
    registered = {}
    for suffix, size_defaults in sizes.items():
        arch_name = model_name + suffix

        def arch(args, size_defaults=size_defaults):
            plugin_architecture(args, family, size_defaults)

        arch.__name__ = arch.__qualname__ = arch_name
        arch.__doc__ = f"{family.__doc__ or model_name} Sizes: {size_defaults.__name__}."
        registered[arch_name] = register_model_architecture(model_name, arch_name)(arch)
    return registered
