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


# what a recipe file may hold at its top level (``depth`` is set by Recipe.with_depth)
RECIPE_KEYS = {"base", "fairseq", "tokens_per_update", "precision", "data", "depths", "generate", "paper", "depth"}
# fairseq's config groups (fairseq.dataclass.configs.FairseqConfig's fields; tests/test_user_errors.py checks)
FAIRSEQ_GROUPS = {
    "common",
    "common_eval",
    "distributed_training",
    "dataset",
    "optimization",
    "checkpoint",
    "bmuf",
    "generation",
    "eval_lm",
    "interactive",
    "model",
    "task",
    "criterion",
    "optimizer",
    "lr_scheduler",
    "scoring",
    "bpe",
    "tokenizer",
    "ema",
}


def _key_lines(text):
    """{key path: line} of a recipe's top-level keys, its ``fairseq:`` groups and its depths'
    (("fairseq",), ("fairseq", "model"), ("depths", "18L-18L", "fairseq", "model"), ...)."""
    lines = {}

    def walk(node, path, depth):
        if not isinstance(node, yaml.MappingNode) or depth == 0:
            return
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                lines[(*path, key.value)] = key.start_mark.line + 1
                walk(value, (*path, key.value), depth - 1)

    try:
        walk(yaml.compose(text, Loader=yaml.SafeLoader), (), 5)
    except yaml.YAMLError:
        pass
    return lines


def _close(word, choices):
    import difflib

    match = difflib.get_close_matches(str(word), sorted(choices), n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


def check_recipe_file(path, data, text):
    """Raise RecipeError, naming ``path`` and the line, for a key a recipe cannot hold: an unknown
    top-level key, a ``fairseq:`` group fairseq does not have, or a group that is not a mapping
    (``optimizer: 5``); the same inside each of ``depths``."""
    lines = _key_lines(text)

    def where(*keys):
        line = lines.get(keys)
        return f"{path}:{line}" if line else f"{path}"

    def check_groups(fairseq, *prefix):
        if not isinstance(fairseq, dict):
            raise RecipeError(f"{where(*prefix)}: '{'.'.join(prefix)}' must be a mapping of fairseq's config groups")
        for group, options in fairseq.items():
            name = ".".join((*prefix, str(group)))
            if group not in FAIRSEQ_GROUPS:
                raise RecipeError(
                    f"{where(*prefix, group)}: '{name}' is not a fairseq config group{_close(group, FAIRSEQ_GROUPS)}"
                )
            if not isinstance(options, dict):
                raise RecipeError(
                    f"{where(*prefix, group)}: '{name}' must be a mapping of its options "
                    f"({{_name: ..., option: value}}), not {options!r}"
                )
            if "_name" in options and not isinstance(options["_name"], str):
                raise RecipeError(f"{where(*prefix, group)}: '{name}._name' must be a name, not {options['_name']!r}")

    for key in data:
        if key not in RECIPE_KEYS:
            group = _close(key, FAIRSEQ_GROUPS)
            hint = (
                " (a fairseq config group: it goes under 'fairseq:')"
                if key in FAIRSEQ_GROUPS
                else _close(key, RECIPE_KEYS) or (group and f"{group[:-2]} under 'fairseq:'?)")
            )
            raise RecipeError(f"{where(key)}: unknown recipe key '{key}'{hint}")

    def check_values(options, *prefix):
        tokens = options.get("tokens_per_update")
        if "tokens_per_update" in options and (not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1):
            raise RecipeError(
                f"{where(*prefix, 'tokens_per_update')}: 'tokens_per_update' must be a positive whole number, not {tokens!r}"
            )
        if "precision" in options and options["precision"] not in ("fp32", "fp16", "bf16"):
            raise RecipeError(
                f"{where(*prefix, 'precision')}: 'precision' must be fp32, fp16 or bf16, not {options['precision']!r}"
            )
        for key in ("generate", "paper"):
            if options.get(key) is not None and not isinstance(options[key], dict):
                raise RecipeError(f"{where(*prefix, key)}: '{key}' must be a mapping, not {options[key]!r}")

    check_values(data)
    if "fairseq" in data:
        check_groups(data["fairseq"], "fairseq")
    depths = data.get("depths")
    if depths is not None and not isinstance(depths, dict):
        raise RecipeError(f"{where('depths')}: 'depths' must map each depth (e.g. 6L-6L) to its options")
    for depth, options in (depths or {}).items():
        if options is None:
            continue
        if not isinstance(options, dict):
            raise RecipeError(f"{where('depths', depth)}: 'depths.{depth}' must be a mapping, not {options!r}")
        for key in options:
            if key not in RECIPE_KEYS - {"base", "depths", "depth"}:
                raise RecipeError(f"{where('depths', depth, key)}: unknown key '{key}' in depths.{depth}")
        check_values(options, "depths", depth)
        if "fairseq" in options:
            check_groups(options["fairseq"], "depths", depth, "fairseq")


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
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text) or {}
    except FileNotFoundError:
        raise RecipeError(f"{path}: recipe not found") from None
    except yaml.YAMLError as err:
        line = getattr(getattr(err, "problem_mark", None), "line", None)
        raise RecipeError(
            f"{path}:{'' if line is None else line + 1}: invalid YAML ({getattr(err, 'problem', err)})"
        ) from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe is a mapping")
    check_recipe_file(path, data, text)
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

    def paper_line(self):
        """The paper's reported number at this recipe's depth as one line ("paper (SOURCE; METRIC):
        38.43 / 19.37 / 35.72"), or None where the recipe carries none."""
        paper = self.data.get("paper") or {}
        for key in ("rouge", "bleu", "perplexity", "wer"):
            value = (paper.get(key) or {}).get(self.data.get("depth"))
            if value is not None:
                break
        else:
            return None

        if isinstance(value, list):  # ROUGE-1, -2, -L
            value = " / ".join(map(paper_number, value))
        elif isinstance(value, dict):  # perplexity or WER per subset
            value = ", ".join(f"{subset} {paper_number(v)}" for subset, v in value.items())
        else:
            value = paper_number(value)
        return f"paper ({paper.get('source', 'no source given')}; {paper.get('metric', key)}): {value}"


def paper_number(value):
    """A reported number as the papers print it (2 decimals), "failed" as it is, None as ""."""
    return f"{value:.2f}" if isinstance(value, (int, float)) else (value or "")


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
        if not path.is_file():
            raise RecipeError(f"{path}: recipe not found{_close(name_or_path, list_recipes(config_dir))}")
    data = load_yaml(path)
    for key in ("fairseq", "tokens_per_update"):
        if key not in data:
            raise RecipeError(f"{path}: missing '{key}'")
    name = str(path.relative_to(config_dir).with_suffix("")) if path.is_relative_to(config_dir) else path.stem
    return Recipe(name, path, data)


def list_recipes(config_dir=CONFIG_DIR):
    """Names of every recipe: the YAML files in a setting's folder (``iwslt14/admin``); files
    starting with ``_`` are bases, and ``configs/*.yaml`` beside the settings are not recipes
    (``claims.yaml``: the claims' definitions)."""
    return sorted(
        str(p.relative_to(config_dir).with_suffix(""))
        for p in Path(config_dir).rglob("*.yaml")
        if not p.name.startswith("_") and p.parent != Path(config_dir)
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
