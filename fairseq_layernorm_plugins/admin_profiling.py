"""Admin's profiling, inside the same ``fairseq-train`` run (Liu et al. 2020, Sec. 4.3): the
core's rule (:mod:`layernorm_methods.admin`) on fairseq's training batches; here only what
fairseq needs around it (LayerDrop off for the pass, samples' ``net_input`` and padding masks,
the Trainer hook, checkpoints, the json report, the DDP broadcast).

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

import json
import logging
import os
import time
from pathlib import Path

import torch
from fairseq import utils
from fairseq.modules import LayerDropModuleList

from fairseq_layernorm_plugins import _compat
from fairseq_layernorm_plugins.atomic import write_json
from layernorm_methods import admin as core_admin
from layernorm_methods.admin import admin_layers, set_omegas_

logger = logging.getLogger(__name__)


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


def profile_admin_(model, samples, mask_padding=False, precision="fp32"):
    """Admin's profiling of a fairseq model on fairseq ``samples``: the core's
    :func:`layernorm_methods.admin.profile_admin_` (the authors' sequential rule, omega the
    mean over the samples, in ``precision``) with each sample's ``net_input``, every layer run
    (LayerDrop off for the pass) and, with ``mask_padding``, the padding masks fairseq's stacks
    compute (:func:`padding_masks`). Returns the core's report, {"encoder" | "decoder": [one row
    per sub-layer: layer, sublayer, var_input (Var(x * omega)), var_branch, omega]}."""
    stack_modules = [getattr(model, name, None) for name in ("encoder", "decoder")]
    layerdrop = [s.layers for s in stack_modules if isinstance(getattr(s, "layers", None), LayerDropModuleList)]
    saved_p = [layers.p for layers in layerdrop]
    for layers in layerdrop:
        layers.p = -1.0  # uniform draws are >= 0 > p: every layer runs
    try:
        return core_admin.profile_admin_(
            model,
            samples,
            run=lambda model, sample: model(**sample["net_input"]),
            padding_masks=padding_masks if mask_padding else None,
            precision=precision,
        )
    finally:
        for layers, p in zip(layerdrop, saved_p):
            layers.p = p


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
    report = profile_admin_(
        model,
        profiling_batches(cfg, task, model, args.admin_profile_batches),
        args.admin_profile_mask_padding,
        getattr(args, "admin_profile_precision", "fp32"),
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
