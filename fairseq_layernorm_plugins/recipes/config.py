"""Recipes: YAML files under ``configs/``, one per paper setting.

A recipe holds the fairseq options as fairseq's own hydra config groups (``task``,
``model``, ``optimizer``, ...) under ``fairseq:``, so the same numbers drive
``fairseq-train`` (flattened to flags) and ``fairseq-hydra-train``; beside them what
fairseq has no option for: the recipe's tokens per update, precision, decoding and
the paper's reported BLEU. ``base: FILE`` inherits another recipe (deep merge; an
optimizer, lr_scheduler or criterion whose ``_name`` changes is replaced, not merged; a
list of bases merges in order),
so shared numbers live once.
"""

import copy
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]  # the checkout (the package is installed editable)
CONFIG_DIR = REPO / "configs"
# fairseq groups whose ``_name`` is a component choice, and the flag that selects it
NAME_FLAGS = {
    "task": "--task",
    "model": "--arch",
    "criterion": "--criterion",
    "optimizer": "--optimizer",
    "lr_scheduler": "--lr-scheduler",
    "bpe": "--bpe",
    "tokenizer": "--tokenizer",
}


class RecipeError(ValueError):
    """A recipe file that cannot be used; the message names the file."""


REPLACED = {"depths"}  # keys an override replaces whole
COMPONENTS = {"optimizer", "lr_scheduler", "criterion"}  # replaced whole when their _name changes


def merge(base, override):
    """Deep merge of two recipe dicts (see the module docstring)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        same_component = (
            key not in COMPONENTS
            or not isinstance(value, dict)
            or value.get("_name", out.get(key, {}).get("_name")) == out.get(key, {}).get("_name")
        )
        if key not in REPLACED and same_component and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_yaml(path, seen=()):
    path = Path(path)
    if path in seen:
        raise RecipeError(f"{path}: 'base' chain loops back to itself")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise RecipeError(f"{path}: recipe not found") from None
    except yaml.YAMLError as err:
        line = getattr(getattr(err, "problem_mark", None), "line", None)
        raise RecipeError(
            f"{path}:{'' if line is None else line + 1}: invalid YAML ({getattr(err, 'problem', err)})"
        ) from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe is a mapping")
    bases = data.pop("base", [])
    merged = {}
    for base in [bases] if isinstance(bases, str) else bases:
        merged = merge(merged, load_yaml(path.parent / base, (*seen, path)))
    return merge(merged, data)


@dataclass
class Recipe:
    name: str
    path: Path
    data: dict

    @property
    def fairseq(self):
        return self.data["fairseq"]

    @property
    def tokens_per_update(self):
        return int(self.data["tokens_per_update"])

    @property
    def max_tokens(self):
        return int(self.fairseq["dataset"]["max_tokens"])

    @property
    def depths(self):
        return list(self.data.get("depths", {}))

    def with_depth(self, depth=None):
        """A copy at ``depth`` ("18L-18L", encoder and decoder; "16L", a decoder-only language
        model; default: the recipe's first): its layer counts and any depth-specific options."""
        depth = depth or (self.depths[0] if self.depths else None)
        if depth is None:
            return self
        if depth not in self.data.get("depths", {}):
            raise RecipeError(f"{self.path}: no depth {depth} (has {', '.join(self.depths) or 'none'})")
        data = merge(self.data, {"fairseq": {"model": layer_counts(depth)}})
        data = merge(data, self.data["depths"][depth] or {})
        data["depth"] = depth
        return Recipe(f"{self.name}@{depth}", self.path, data)


def layer_counts(depth):
    """fairseq's layer options of a depth: "18L-18L" -> encoder and decoder layers, "16L" ->
    decoder layers (a language model)."""
    counts = [int(n) for n in depth.replace("L", "").split("-")]
    return dict(zip(("encoder_layers", "decoder_layers")[-len(counts) :], counts))


def load_recipe(name_or_path, config_dir=CONFIG_DIR):
    """A recipe by name (``iwslt14/admin``, relative to ``configs/``) or by path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = Path(config_dir) / f"{name_or_path}.yaml"
    data = load_yaml(path)
    for key in ("fairseq", "tokens_per_update"):
        if key not in data:
            raise RecipeError(f"{path}: missing '{key}'")
    name = str(path.relative_to(config_dir).with_suffix("")) if path.is_relative_to(config_dir) else path.stem
    return Recipe(name, path, data)


def list_recipes(config_dir=CONFIG_DIR):
    """Names of every recipe (files starting with ``_`` are bases, not recipes)."""
    return sorted(
        str(p.relative_to(config_dir).with_suffix(""))
        for p in Path(config_dir).rglob("*.yaml")
        if not p.name.startswith("_")
    )


def _value(value):
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


def fairseq_flags(groups):
    """fairseq's hydra groups -> ``fairseq-train`` arguments (``task.data`` positional
    first; ``x_y: v`` -> ``--x-y v``; true -> ``--x-y``; false / null -> nothing)."""
    groups = copy.deepcopy(groups)
    args = [str(groups.get("task", {}).pop("data"))] if "data" in groups.get("task", {}) else []
    for group, options in groups.items():
        options = dict(options)
        if "_name" in options:
            args += [NAME_FLAGS[group], str(options.pop("_name"))]
        for key, value in options.items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                args.append(flag)
            elif value is False or value is None:
                continue
            else:
                args += [flag, *_value(value)]
    return args
