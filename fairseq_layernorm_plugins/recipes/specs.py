"""A run's spec (everything that decides its outcome: the run, its budget and its fairseq
options, as nested dicts) compared by what it trains, not by how its recipe is written: a
fairseq option set to fairseq's own default (``clip_norm: 0.0``, as the authors' scripts spell
it) is the option left unset, so writing it into a recipe neither retrains the runs made
without it nor shows up as a difference between two runs.

Defaults are fairseq's dataclass defaults: the top-level groups of ``FairseqConfig``
(``common``, ``optimization``, ``dataset``, ``checkpoint``, ...) and, for the groups named by
``_name`` (``task``, ``criterion``, ``optimizer``, ``lr_scheduler``), the registered
component's dataclass. A model's defaults are set by its architecture function, not by a
dataclass: :func:`recorded` writes the ones it filled in beside the spec ("arch_defaults"),
so that a run trained before an architecture's default changed is told from one trained
after, and an option written out as its architecture's default is the option left unset.
"""

import argparse
import dataclasses
import functools
import json

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


def arch_defaults(model):
    """{option: value} that the architecture function of ``model`` (a spec's model group,
    {"_name": arch, option: value}) fills in for the options it leaves unset, as fairseq-train
    calls it (``ARCH_CONFIG_REGISTRY``, on the options as a Namespace); in JSON's types (a
    tuple is a list), as a spec read back has them. {} for a name that is no architecture."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    import fairseq_layernorm_plugins  # noqa: F401  (registers the plugin's archs)

    arch = ARCH_CONFIG_REGISTRY.get(model.get("_name"))
    if arch is None:
        return {}
    written = {key: value for key, value in model.items() if key != "_name"}
    args = argparse.Namespace(**written)
    arch(args)
    filled = {key: value for key, value in vars(args).items() if key not in written}
    return json.loads(json.dumps(filled, default=str))


def recorded(spec):
    """``spec`` as a run records it: with its architecture's defaults ("arch_defaults",
    :func:`arch_defaults`) when it names one."""
    model = spec.get("fairseq", {}).get("model", {})
    return {**spec, "arch_defaults": arch_defaults(model)} if "_name" in model else spec


def _compared(spec, with_arch):
    """``spec`` without fairseq's defaults; with its model group completed by its recorded
    architecture defaults (``with_arch``), or, for comparing with a spec recorded without
    them, as written."""
    spec = without_defaults(spec)
    spec, filled = {key: value for key, value in spec.items() if key != "arch_defaults"}, spec.get("arch_defaults")
    if with_arch and filled:
        spec["fairseq"] = {**spec["fairseq"], "model": {**filled, **spec["fairseq"]["model"]}}
    return spec


def same_run(a, b):
    """Whether specs ``a`` and ``b`` train the same run: their options equal but for those
    set to fairseq's defaults, their architectures' defaults equal too where both recorded
    them (a spec recorded before runs recorded them is compared on its written options)."""
    if a == b:
        return True
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    with_arch = "arch_defaults" in a and "arch_defaults" in b
    return _compared(a, with_arch) == _compared(b, with_arch)
