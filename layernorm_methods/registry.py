"""The methods of the core, each registered once by its module under ``methods/``: its layer
mixin (the formulas), its defaults (the options its authors ran with) and its LayerNorm
placement, from which the core builds its encoder and decoder layer classes."""

import functools
import importlib
import pkgutil
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace

from layernorm_methods.layers import DecoderLayer, EncoderLayer
from layernorm_methods.stacks import Decoder, Encoder


def no_defaults(cfg):
    """A method without options of its own."""


@dataclass(frozen=True)
class CoreMethod:
    """``mixin``: the method's layer mixin (``residual_connection``, ``method_init_``,
    ``init_stack_``, ...), the same class the fairseq plugin's layers mix in; ``defaults(cfg)``
    sets the method's options where ``cfg`` lacks them (``cfg.x = getattr(cfg, "x", default)``),
    the function its fairseq architectures call; ``normalize_before``: True for the Pre-LN
    family, False for the Post-LN family; ``encoder_cls`` / ``decoder_cls``: the stack classes
    (a method with its own stack loop, DLCL, gives its own); ``refuses``: {setting: why} for
    the settings the method cannot honour (``configure`` refuses them set)."""

    name: str
    mixin: type
    defaults: object = no_defaults
    normalize_before: bool = False
    encoder_cls: type = Encoder
    decoder_cls: type = Decoder
    refuses: dict = field(default_factory=dict)

    @functools.cached_property
    def encoder_layer(self):
        """The encoder layer class: the method's mixin over :class:`EncoderLayer`."""
        return self._layer_class(EncoderLayer)

    @functools.cached_property
    def decoder_layer(self):
        """The decoder layer class: the method's mixin over :class:`DecoderLayer`."""
        return self._layer_class(DecoderLayer)

    def _layer_class(self, base):
        """The mixin over ``base``, bound in the mixin's module (so ``torch.save(model)`` and
        pickling find it by name)."""
        name = f"{self.mixin.__name__}{base.__name__}"
        module = sys.modules[self.mixin.__module__]
        if not hasattr(module, name):
            setattr(module, name, type(name, (self.mixin, base), {"__module__": module.__name__}))
        return getattr(module, name)

    @functools.cached_property
    def options(self):
        """The names of the method's own options (what its defaults set)."""
        filled = SimpleNamespace()
        self.defaults(filled)
        return tuple(vars(filled))


METHODS = {}  # name -> CoreMethod


def register(name, mixin, defaults=no_defaults, normalize_before=False, **more):
    """Register a method of the core (from its module under ``methods/``); returns it.
    ``more``: :class:`CoreMethod`'s ``encoder_cls``, ``decoder_cls``, ``refuses``."""
    METHODS[name] = CoreMethod(name, mixin, defaults, normalize_before, **more)
    return METHODS[name]


@functools.cache
def load_all():
    """Import every module under ``methods/`` (each registers its method)."""
    from layernorm_methods import methods

    for module in pkgutil.iter_modules(methods.__path__):
        importlib.import_module(f"{methods.__name__}.{module.name}")


def get(name):
    """The registered method ``name``; ValueError naming the known ones."""
    load_all()
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(sorted(METHODS))}")
    return METHODS[name]


def method_names():
    """Every registered method of the core, sorted by name."""
    load_all()
    return sorted(METHODS)
