"""A run's spec (everything that decides its outcome: the run, its budget and its fairseq
options, as nested dicts) compared by what it trains, not by how its recipe is written: a
fairseq option set to fairseq's own default (``clip_norm: 0.0``, as the authors' scripts spell
it) is the option left unset, so writing it into a recipe neither retrains the runs made
without it nor shows up as a difference between two runs.

Defaults are fairseq's dataclass defaults: the top-level groups of ``FairseqConfig``
(``common``, ``optimization``, ``dataset``, ``checkpoint``, ...) and, for the groups named by
``_name`` (``task``, ``criterion``, ``optimizer``, ``lr_scheduler``), the registered
component's dataclass. Model options are kept as written: a model's defaults are set by its
architecture function, not by a dataclass.
"""

import dataclasses
import functools

NAMED = {  # spec group: fairseq's registry of its components' dataclasses
    "task": ("fairseq.tasks", "TASK_DATACLASS_REGISTRY"),
    "criterion": ("fairseq.criterions", "CRITERION_DATACLASS_REGISTRY"),
    "optimizer": ("fairseq.optim", "OPTIMIZER_DATACLASS_REGISTRY"),
    "lr_scheduler": ("fairseq.optim.lr_scheduler", "LR_SCHEDULER_DATACLASS_REGISTRY"),
}
UNSET = object()


def _field_defaults(config_class):
    """{field: default} of a dataclass (its default_factory called); omegaconf's ``II``
    interpolations ("${...}") are left out: they are not values."""
    defaults = {}
    for field in dataclasses.fields(config_class):
        if field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            continue
        if not (isinstance(value, str) and value.startswith("${")):
            defaults[field.name] = value
    return defaults


@functools.cache
def _group_defaults():
    from fairseq.dataclass.configs import FairseqConfig

    return {
        f.name: _field_defaults(f.type) for f in dataclasses.fields(FairseqConfig) if dataclasses.is_dataclass(f.type)
    }


def fairseq_defaults(group, name=None):
    """{option: fairseq's default} of a spec's fairseq ``group``; ``name``: the component a
    named group (:data:`NAMED`) chose. {} where fairseq has none to tell (a model, an unknown
    component)."""
    if group in NAMED:
        import importlib

        import fairseq_layernorm_plugins  # noqa: F401  (registers the plugin's optimizers and schedulers)

        module, registry = NAMED[group]
        config_class = getattr(importlib.import_module(module), registry).get(name)
        return _field_defaults(config_class) if config_class is not None else {}
    return _group_defaults().get(group, {})


def _number(x):
    return isinstance(x, int | float) and not isinstance(x, bool)


def _same(value, default):
    """``value`` (from YAML or a command line) is ``default`` (a dataclass's): lists and tuples
    alike (``lr: [0.25]``), ints and floats alike (``weight_decay: 0``), booleans only as booleans."""
    if isinstance(value, list | tuple) and isinstance(default, list | tuple):
        return len(value) == len(default) and all(map(_same, value, default))
    if _number(value) and _number(default):
        return value == default
    return type(value) is type(default) and value == default


def without_defaults(spec):
    """``spec`` with each fairseq option equal to fairseq's default left out (and a group left
    with none)."""
    if "fairseq" not in spec:
        return spec
    options = {}
    for group, values in spec["fairseq"].items():
        if not isinstance(values, dict):
            options[group] = values
            continue
        defaults = fairseq_defaults(group, values.get("_name"))
        kept = {
            key: value for key, value in values.items() if key == "_name" or not _same(value, defaults.get(key, UNSET))
        }
        if kept:  # a group of defaults only is the group left out
            options[group] = kept
    return {**spec, "fairseq": options}


def same_run(a, b):
    """Whether specs ``a`` and ``b`` train the same run (their options equal but for those
    set to fairseq's defaults)."""
    return a == b or without_defaults(a) == without_defaults(b)
