"""The methods this package offers, registered once by their model modules.

Every list of methods in the scripts (the main job, the stability grid, the diagnostics,
the GPU check, the throughput benchmark) and every plot's label and colour come from here.
Adding a method is one model module under ``models/`` (its fairseq model, its
architectures via ``register_arch_family``, one ``register_method`` call) plus its recipes,
``configs/<setting>/<name>.yaml`` for each setting it should run in.
"""

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Method:
    """``name``: the recipe file name in each setting (``configs/iwslt14/<name>.yaml``);
    ``model``: the fairseq model it registers; ``label``: for tables and plots; ``paper``:
    where it comes from; ``order``: its place in tables and plots."""

    name: str
    model: str
    label: str
    paper: str
    order: int = 100

    def arch(self, size=""):
        """The architecture of size ``size`` (a suffix of ``models.base.ARCH_SIZES``)."""
        return self.model + size

    @property
    def colour(self):
        """Its matplotlib colour, the same in every plot."""
        return f"C{list(METHODS).index(self.name) % 10}"


METHODS = {}  # name -> Method, in table order


def register_method(name, model, label, paper, order=100):
    """Register a method (from its model module); returns its :class:`Method`."""
    if name in METHODS and METHODS[name].model != model:
        raise ValueError(f"method {name!r} is already registered for {METHODS[name].model}")
    METHODS[name] = Method(name, model, label, paper, order)
    for key in sorted(METHODS, key=lambda k: METHODS[k].order):  # keep table order
        METHODS[key] = METHODS.pop(key)
    return METHODS[name]


def method_names(setting=None, config_dir=None):
    """Registered method names in table order; with ``setting`` (``iwslt14``,
    ``iwslt14_mini``, ``multi30k``, ...) only those with a recipe there."""
    from fairseq_layernorm_plugins import models  # noqa: F401  (its modules register every method)
    from fairseq_layernorm_plugins.recipes.config import CONFIG_DIR

    folder = Path(config_dir or CONFIG_DIR) / (setting or "")
    return [name for name in METHODS if setting is None or (folder / f"{name}.yaml").is_file()]


def label(name):
    """The method's label, or ``name`` itself for one that is not registered."""
    return METHODS[name].label if name in METHODS else name
