"""Admin's profiling, inside the same ``fairseq-train`` run (Liu et al. 2020, Sec. 4.3).

The authors' code needs a separate profiling run that writes ``profile.ratio.init``
and a file at decode time. Here profiling happens just before fairseq builds its
``Trainer``: the model exists with its initial parameters, but the fp16 conversion,
the fp32 master copies, the optimizer and the DDP wrapper do not yet, so nothing
overwrites the profiled omega. It is skipped whenever fairseq is about to load a
checkpoint that holds omega (resume, ``--continue-once``, ``--restore-file`` with or
without ``--reset-*``, ``--finetune-from-model``); a checkpoint without omega (a
Post-LN model's) is profiled on its own weights, and fairseq's load then keeps the
profiled omega (:meth:`TransformerAdminModel.upgrade_state_dict_named`).
``fairseq-generate`` builds no Trainer and never profiles. Every rank profiles the same batches (one unsharded
iterator, the run's seed) and omega is then broadcast from rank 0, so all ranks
start identical.
"""

import copy
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import NamedTuple

import torch
from fairseq import utils
from fairseq.modules import LayerDropModuleList

from fairseq_layernorm_plugins import _compat
from fairseq_layernorm_plugins.atomic import write_json
from fairseq_layernorm_plugins.modules.stacks import stack_layers

logger = logging.getLogger(__name__)


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
    (``--admin-profile-mask-padding``); None includes them, as the authors' code."""

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


def profiles(model):
    """Whether ``model`` gets its omega from profiling (``--admin-init profile``): an Admin
    model, profiled on real batches before training (or omega from ``--admin-profile-from``)."""
    return bool(admin_layers(model)) and getattr(getattr(model, "args", None), "admin_init", None) == "profile"


def require_trainer_hook():
    """Install the ``Trainer.__init__`` hook that runs :func:`maybe_profile` (``_compat``'s
    ``admin_profiling``), or fail in one line when the user turned it off."""
    if not _compat.patch_enabled("admin_profiling"):
        raise ValueError(
            f"--admin-init profile needs the Trainer hook that {_compat.SWITCH} turned off: "
            "use --admin-init closed-logn (or another closed form), or turn the hook back on"
        )
    _compat.apply("admin_profiling", maybe_profile)


def profile_admin_(model, batches, mask_padding=False):
    """Admin's profiling (see :mod:`fairseq_layernorm_plugins.models.transformer_admin`):
    each of ``batches`` (fairseq samples) goes through ``model`` in train mode in one
    sequential pass per batch, with every layer run (LayerDrop off); each omega is set to
    the mean of its per-batch values. Returns {"encoder" | "decoder": [one row per
    sub-layer: layer, sublayer, var_input (Var(x * omega)), var_branch, omega]}, the
    variances averaged over the batches."""
    stacks = admin_layers(model)
    stack_modules = [getattr(model, name, None) for name in ("encoder", "decoder")]
    layerdrop = [s.layers for s in stack_modules if isinstance(getattr(s, "layers", None), LayerDropModuleList)]
    saved_p = [layers.p for layers in layerdrop]
    was_training = model.training
    per_batch = {stack: [] for stack in stacks}
    with torch.no_grad():
        model.train()  # the authors profile with dropout on
        for layers in layerdrop:
            layers.p = -1.0  # uniform draws are >= 0 > p: every layer runs
        try:
            for sample in batches:
                profiles = {
                    stack: AdminProfile(padding_masks(model, sample)[stack] if mask_padding else None)
                    for stack in stacks
                }
                for stack, layers in stacks.items():
                    for layer in layers:
                        layer.profile = profiles[stack]
                model(**sample["net_input"])
                for stack, profile in profiles.items():
                    per_batch[stack].append(profile.rows)
        finally:
            for layers in stacks.values():
                for layer in layers:
                    layer.profile = None
            for layers, p in zip(layerdrop, saved_p):
                layers.p = p
            model.train(was_training)
        report = {}
        for stack, layers in stacks.items():
            index = {id(layer): i for i, layer in enumerate(layers)}
            expected = sum(layer.num_sublayers for layer in layers)
            if any(len(rows) != expected for rows in per_batch[stack]):
                raise RuntimeError(
                    f"Admin profiling: the {stack} ran {len(per_batch[stack][0])} of {expected} sub-layers"
                )
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


HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}


def profile_in_precision_(model, batches, precision="fp32", mask_padding=False):
    """:func:`profile_admin_` in ``precision``: fp32 on ``model`` itself; fp16 / bf16 on a half
    copy (the authors profile inside an ``--fp16`` run), whose omegas, as computed (Python
    floats), are then set in ``model``. Returns the profile report."""
    if precision == "fp32":
        return profile_admin_(model, batches, mask_padding)
    report = profile_admin_(copy.deepcopy(model).to(HALF[precision]), batches, mask_padding)
    set_omegas_(model, report)
    return report


def set_omegas_(model, report, source="profile"):
    """Set every omega of ``model`` from a profile report ({"encoder" | "decoder": rows of
    layer, sublayer, omega}, as :func:`profile_admin_` returns and ``--admin-profile-json``
    writes); ``source`` names it in the error when the report does not fit the model."""
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


def omegas_from_file_(model, path):
    """``--admin-profile-from PATH``: omega from another run's ``--admin-profile-json`` (the
    authors profile once, with seed 1111, and train every seed of a setting from that file)."""
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable Admin profile ({err})") from None
    set_omegas_(model, report, source=path)
    logger.info(f"Admin: omega comes from {path} (--admin-profile-from); not profiling")


def padding_masks(model, sample):
    """{"encoder": (B, S), "decoder": (B, T)} True at padding, as fairseq's encoder and
    decoder compute them from the source tokens and the previous output tokens (a language
    model's decoder reads the source tokens)."""
    net_input = sample["net_input"]
    masks = {"decoder": net_input.get("prev_output_tokens", net_input["src_tokens"]).eq(model.decoder.padding_idx)}
    if getattr(model, "encoder", None) is not None:
        masks["encoder"] = net_input["src_tokens"].eq(model.encoder.padding_idx)
    return masks


def checkpoint_to_load(checkpoint_cfg):
    """The checkpoint fairseq's ``checkpoint_utils.load_checkpoint`` is about to read, or
    None (its path resolution, mirrored): ``checkpoint_last.pt`` when it exists, else
    ``--continue-once`` or ``--finetune-from-model``; or ``--restore-file``."""
    suffix = checkpoint_cfg.checkpoint_suffix or ""
    if checkpoint_cfg.restore_file == "checkpoint_last.pt":
        last = os.path.join(checkpoint_cfg.save_dir, f"checkpoint_last{suffix}.pt")
        if os.path.exists(last):
            return last
        return getattr(checkpoint_cfg, "continue_once", None) or checkpoint_cfg.finetune_from_model
    path = checkpoint_cfg.restore_file.replace(".pt", suffix + ".pt") if suffix else checkpoint_cfg.restore_file
    return path if os.path.exists(path) else None


def omega_keys(state):
    return [key for key in state if key.endswith(".omega")]


def load_split_aside(task, split):
    """``split`` as fairseq's trainer loads it for epoch 1, leaving ``task.datasets`` as it was.

    fairseq's ``Trainer`` loads the training split itself, and some tasks' ``load_dataset``
    does not expect to find it loaded already: ``translation_multi_simple_epoch`` then
    fails with an UnboundLocalError (``shard_epoch``), and a sharded task would move on to
    its next shard. A split already loaded is used as it is."""
    if split in task.datasets:
        return task.datasets[split]
    task.load_dataset(split, epoch=1, combine=True)
    return task.datasets.pop(split)


def profiling_batches(cfg, task, model, num_batches):
    """The first ``num_batches`` training batches of epoch 1, the same on every rank; the
    task is left as it was (:func:`load_split_aside`, no cached epoch iterator)."""
    iterator = task.get_batch_iterator(
        dataset=load_split_aside(task, cfg.dataset.train_subset),
        max_tokens=cfg.dataset.max_tokens,
        max_sentences=cfg.dataset.batch_size,
        max_positions=(model.max_positions()),
        ignore_invalid_inputs=True,
        required_batch_size_multiple=cfg.dataset.required_batch_size_multiple,
        seed=cfg.common.seed,
        num_shards=1,
        shard_id=0,
        epoch=1,
        disable_iterator_cache=True,
    ).next_epoch_itr(shuffle=True)
    device = next(model.parameters()).device
    batches = []
    for sample in iterator:
        batches.append(_to_device(sample, device))
        if len(batches) == num_batches:
            break
    return batches


def _to_device(sample, device):
    return utils.move_to_cuda(sample, device=device) if device.type == "cuda" else sample


def maybe_profile(cfg, task, model):
    """Profile ``model`` (or take omega from ``--admin-profile-from``) unless it does not
    profile or fairseq is about to load its omega from a checkpoint (module docstring)."""
    if not profiles(model):
        return
    path = checkpoint_to_load(cfg.checkpoint)
    if path is not None:
        state = _compat.load_checkpoint(path, mmap=True)["model"]
        if omega_keys(state):
            logger.info(f"Admin: omega comes from {path}, the checkpoint to be loaded; not profiling")
            return
        # not an Admin checkpoint (a Post-LN one, say): profile the weights it holds
        missing, unexpected = model.load_state_dict(state, strict=False)  # omega filled in by upgrade_state_dict_named
        if unexpected or missing:
            raise ValueError(
                f"{path}: not a checkpoint of this model (missing {missing[:3]}, unexpected {unexpected[:3]})"
            )
        logger.info(f"Admin: {path} holds no omega; profiling its weights")
    set_initial_omegas_(cfg, task, model)


def set_initial_omegas_(cfg, task, model):
    """Set the omega of an Admin ``model`` as ``fairseq-train`` does before its first update:
    from ``--admin-profile-from``, or profiled on the first ``--admin-profile-batches``
    training batches of epoch 1 (the run's seed and ``--max-tokens``) in
    ``--admin-profile-precision``; logs each sub-layer's variances and omega, and writes
    ``--admin-profile-json``."""
    args = model.args
    if getattr(args, "admin_profile_from", None):
        return omegas_from_file_(model, args.admin_profile_from)
    if torch.cuda.is_available() and not cfg.common.cpu:
        model.cuda()
    start = time.perf_counter()
    report = profile_in_precision_(
        model,
        profiling_batches(cfg, task, model, args.admin_profile_batches),
        getattr(args, "admin_profile_precision", "fp32"),
        args.admin_profile_mask_padding,
    )
    seconds = time.perf_counter() - start
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        for layers in admin_layers(model).values():
            for layer in layers:
                torch.distributed.broadcast(layer.omega.data, src=0)
    for stack, rows in report.items():
        for r in rows:
            logger.info(
                f"Admin profile {stack} layer {r['layer']} sub-layer {r['sublayer']}: "
                f"Var[x]={r['var_input']:.4f} Var[f]={r['var_branch']:.4f} omega={r['omega']:.4f}"
            )
    logger.info(f"Admin: profiled {args.admin_profile_batches} batch(es) in {seconds:.2f} s")
    if args.admin_profile_json and (not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0):
        write_json(args.admin_profile_json, {"seconds": seconds, "batches": args.admin_profile_batches, **report})
