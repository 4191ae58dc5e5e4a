"""Admin's profiling (Liu et al. 2020, Sec. 4.3) for any model built from Admin's layers
(:class:`~layernorm_methods.methods.admin.AdminLayerMixin`): a core model of this package or a
fairseq plugin model, whose ``encoder`` and / or ``decoder`` hold the layers as ``.layers``.

    from layernorm_methods import build_language_model
    from layernorm_methods.admin import profile_admin_
    model = build_language_model("admin", vocab=50000, layers=12)  # omega = 1
    report = profile_admin_(model, [tokens])                        # tokens (B, T): omega profiled

The rule, as the authors' code (Transformer-Clinic): each batch goes through the model once, in
train mode (dropout on), sequentially: per stack a running ratio starts at 1.0; at each
sub-layer i, in forward order, omega_i is set to the ratio, the sub-layer's output
LN(x_{i-1} * omega_i + f_i) already uses it, and the ratio becomes
sqrt(Var(x_{i-1} * omega_i) + Var(f_i)) (Var: one scalar over the whole tensor). Over several
batches each omega is the mean of its per-batch values. The fairseq plugin runs this on its
training batches inside ``fairseq-train`` (:mod:`fairseq_layernorm_plugins.admin_profiling`:
LayerDrop, fairseq samples, the Trainer hook, the json report, checkpoints, DDP).
"""

import copy
import math
from typing import NamedTuple

import torch

from layernorm_methods.layers import stack_layers

HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}


def admin_next_omega(var_scaled_input, var_branch):
    """The running ratio after sub-layer i, the next sub-layer's omega:
    sqrt(Var(x_{i-1} * omega_i) + Var(f_i)) (Liu et al. 2020, Sec. 4.3; Transformer-Clinic)."""
    return math.sqrt(var_scaled_input + var_branch)


class ProfileRow(NamedTuple):
    """One sub-layer of a profiling pass: its layer (the module during the pass, its index in
    the report), its sub-layer index from 0, Var(x * omega), Var(f) and the omega it used."""

    layer: object
    sublayer: int
    var_input: float
    var_branch: float
    omega: float


class AdminProfile:
    """One stack's state during a sequential profiling pass: the running ratio (the next
    sub-layer's omega, 1.0 at the start) and one :class:`ProfileRow` per sub-layer in forward
    order.

    ``padding_mask`` (B, T) True at padding excludes those positions from the variances
    (``admin_profile_mask_padding``); None includes them, as the authors' code."""

    def __init__(self, padding_mask=None):
        self.ratio = 1.0
        self.rows = []
        self.keep = None if padding_mask is None else ~padding_mask.t().unsqueeze(-1)  # (T, B, 1)

    def variance(self, t):
        """One scalar over the whole (T, B, C) tensor, np.var as the authors (population variance)."""
        t = t.detach().float()
        if self.keep is not None:
            t = t.masked_select(self.keep.expand_as(t))
        return t.var(unbiased=False).item()

    def step(self, layer, sublayer, scaled_input, branch):
        """Record sub-layer ``sublayer`` (from 0) and advance the running ratio."""
        var_input, var_branch = self.variance(scaled_input), self.variance(branch)
        self.rows.append(ProfileRow(layer, sublayer, var_input, var_branch, self.ratio))
        self.ratio = admin_next_omega(var_input, var_branch)


def admin_layers(model):
    """{"encoder" | "decoder": every layer of the stack, LayerDrop or not}, for each stack of
    ``model`` whose layers are Admin's (they hold ``omega``)."""
    stacks = {name: getattr(model, name, None) for name in ("encoder", "decoder")}
    layers = {name: stack_layers(stack) for name, stack in stacks.items() if hasattr(stack, "layers")}
    return {name: found for name, found in layers.items() if found and all(hasattr(x, "omega") for x in found)}


def run_batch(model, batch):
    """The default ``run`` of :func:`profile_admin_`: ``model(*batch)`` for a tuple or list,
    ``model(**batch)`` for a dict, else ``model(batch)``."""
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    if isinstance(batch, dict):
        return model(**batch)
    return model(batch)


def profile_admin_(model, batches, run=None, padding_masks=None, precision="fp32"):
    """Set every omega of ``model`` (Admin's layers in ``model.encoder`` / ``model.decoder``)
    by the authors' sequential rule (module docstring): each of ``batches`` goes through
    ``run(model, batch)`` (default :func:`run_batch`) in train mode under no_grad, one
    sequential pass per batch; each omega is the mean of its per-batch values. The model's
    mode is restored after.

    ``padding_masks``: None (the variances over every position, as the authors), or a
    function ``(model, batch) -> {"encoder" | "decoder": (B, T) True at padding}``, or one
    such dict per batch. ``precision``: fp32 profiles ``model`` itself; fp16 / bf16 a half
    copy (the authors profile inside an ``--fp16`` run), whose omegas, as computed (Python
    floats), are then set in ``model``.

    Returns {"encoder" | "decoder": [one row per sub-layer, in forward order: {"layer" (its
    index in the stack), "sublayer" (from 0), "var_input" (Var(x * omega)), "var_branch"
    (Var(f)), "omega"}]}, the variances averaged over the batches. ValueError for a model
    without Admin's layers."""
    if precision not in ("fp32", *HALF):
        raise ValueError(f"precision must be fp32, {' or '.join(HALF)}, not {precision!r}")
    if precision != "fp32":
        report = profile_admin_(copy.deepcopy(model).to(HALF[precision]), batches, run, padding_masks)
        set_omegas_(model, report)
        return report
    stacks = admin_layers(model)
    if not stacks:
        raise ValueError("Admin profiling: the model has no Admin layers (encoder / decoder .layers holding omega)")
    run = run or run_batch
    was_training = model.training
    per_batch = {stack: [] for stack in stacks}
    with torch.no_grad():
        model.train()  # the authors profile with dropout on
        try:
            for i, batch in enumerate(batches):
                if padding_masks is None:
                    masks = {}
                else:
                    masks = padding_masks(model, batch) if callable(padding_masks) else padding_masks[i]
                profiles = {stack: AdminProfile(masks.get(stack)) for stack in stacks}
                for stack, layers in stacks.items():
                    for layer in layers:
                        layer.profile = profiles[stack]
                run(model, batch)
                for stack, profile in profiles.items():
                    per_batch[stack].append(profile.rows)
        finally:
            for layers in stacks.values():
                for layer in layers:
                    layer.profile = None
            model.train(was_training)
        return averaged_(stacks, per_batch)


def averaged_(stacks, per_batch):
    """Set each omega to the mean of its per-batch values; the report of :func:`profile_admin_`
    from ``per_batch`` ({stack: [one list of :class:`ProfileRow` per batch]})."""
    report = {}
    for stack, layers in stacks.items():
        index = {id(layer): i for i, layer in enumerate(layers)}
        expected = sum(layer.num_sublayers for layer in layers)
        if not per_batch[stack]:
            raise ValueError("Admin profiling: no batches")
        for rows in per_batch[stack]:
            if len(rows) != expected:
                raise RuntimeError(f"Admin profiling: the {stack} ran {len(rows)} of {expected} sub-layers")
        report[stack] = []
        for position, row in enumerate(per_batch[stack][0]):
            batches = [rows[position] for rows in per_batch[stack]]

            def mean(field, batches=batches):
                return sum(getattr(r, field) for r in batches) / len(batches)

            row.layer.omega[row.sublayer].fill_(mean("omega"))
            report[stack].append(
                {
                    "layer": index[id(row.layer)],
                    "sublayer": row.sublayer,
                    "var_input": mean("var_input"),
                    "var_branch": mean("var_branch"),
                    "omega": mean("omega"),
                }
            )
    return report


def set_omegas_(model, report, source="profile"):
    """Set every omega of ``model`` from a profile report ({"encoder" | "decoder": rows of
    layer, sublayer, omega}, as :func:`profile_admin_` returns and the fairseq plugin's
    ``--admin-profile-json`` writes); ``source`` names it in the error when the report does not
    fit the model."""
    stacks = admin_layers(model)
    for stack, layers in stacks.items():
        rows = report.get(stack) if isinstance(report, dict) else None
        expected = [(i, k) for i, layer in enumerate(layers) for k in range(layer.num_sublayers)]
        if not isinstance(rows, list) or [(r.get("layer"), r.get("sublayer")) for r in rows] != expected:
            raise ValueError(
                f"{source}: its {stack} rows are not this model's {len(expected)} {stack} sub-layers "
                f"({len(layers)} layers)"
            )
    with torch.no_grad():
        for stack, layers in stacks.items():
            for row in report[stack]:
                layers[row["layer"]].omega[row["sublayer"]].fill_(float(row["omega"]))
