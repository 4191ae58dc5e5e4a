"""The methods this package offers, registered once by their model modules.

Every list of methods in the scripts (the main job, the stability grid, the diagnostics,
the GPU check, the throughput benchmark) comes from here, and so do the labels and colours
of the training-curve plots (``experiments/report.py``).
Adding a method is one model module under ``models/`` (its fairseq model, its
architectures via ``register_arch_family``, one ``register_method`` call) plus its recipes,
``configs/<setting>/<name>.yaml`` for each setting it should run in.
"""

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Method:
    """``name``: the recipe file name in each setting (``configs/iwslt14/<name>.yaml``);
    ``model``: the fairseq model it registers (the encoder-decoder); ``label``: for tables and
    plots; ``paper``: where it comes from; ``order``: its place in tables and plots;
    ``lm_model``: its decoder-only language model, if it registers one; ``s2t_model``: its
    speech-to-text model, if it registers one."""

    name: str
    model: str
    label: str
    paper: str
    order: int = 100
    lm_model: str | None = None
    s2t_model: str | None = None

    def arch(self, size=""):
        """The architecture of size ``size`` (a suffix of ``models.base.ARCH_SIZES``)."""
        return self.model + size

    def lm_arch(self, size=""):
        """The language-model architecture of size ``size`` (a suffix of ``models.base_lm.LM_ARCH_SIZES``)."""
        if self.lm_model is None:
            raise ValueError(f"method {self.name!r} registers no language model")
        return self.lm_model + size

    def s2t_arch(self, size=""):
        """The speech-to-text architecture of size ``size`` (a suffix of
        ``models.base_s2t.S2T_ARCH_SIZES``); ValueError saying why a method has none."""
        if self.s2t_model is None:
            from fairseq_layernorm_plugins.models.base_s2t import NOT_FOR_SPEECH

            why = NOT_FOR_SPEECH.get(self.name, "it registers none")
            raise ValueError(f"method {self.name!r} has no speech-to-text model: {why}")
        return self.s2t_model + size

    @property
    def colour(self):
        """Its matplotlib colour, the same in every plot: its place in table order."""
        return COLOURS[method_names().index(self.name) % len(COLOURS)]


METHODS = {}  # name -> Method
# the four papers' methods (Post-LN, Pre-LN, Admin, T-Fixup, B2T, DeepNet): the main job's default
PAPER_METHODS = ("postln", "preln", "admin", "tfixup", "b2t", "deepnet")
# matplotlib's ten default colours, then six more that stand apart from them
COLOURS = tuple(f"C{i}" for i in range(10)) + ("black", "darkgoldenrod", "teal", "navy", "magenta", "lime")


def register_method(name, model, label, paper, order=100, lm_model=None, s2t_model=None):
    """Register a method (from its model module); returns its :class:`Method`."""
    if name in METHODS and METHODS[name].model != model:
        raise ValueError(f"method {name!r} is already registered for {METHODS[name].model}")
    METHODS[name] = Method(name, model, label, paper, order, lm_model, s2t_model)
    return METHODS[name]


def pick_methods(spec, known, default):
    """The method names a ``--methods`` value gives: comma-separated, in the order given;
    "all": ``known``; empty or None: ``default``. ValueError naming any not in ``known``."""
    chosen = list(known) if spec == "all" else spec.split(",") if spec else list(default)
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {', '.join(known)}")
    return chosen


def method_names(setting=None, config_dir=None):
    """Registered method names in table order; with ``setting`` (``iwslt14``,
    ``iwslt14_mini``, ``multi30k``, ...) only those with a recipe there. Every method is
    registered by then: importing this module imports the package, whose ``__init__``
    imports every model module."""
    from fairseq_layernorm_plugins.recipes.config import CONFIG_DIR

    folder = Path(config_dir or CONFIG_DIR) / (setting or "")
    in_order = sorted(METHODS, key=lambda name: METHODS[name].order)  # sorted() is stable: ties keep registration order
    return [name for name in in_order if setting is None or (folder / f"{name}.yaml").is_file()]
