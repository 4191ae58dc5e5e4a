"""Admin's profiling, inside the same ``fairseq-train`` run (Liu et al. 2020, Sec. 4.3).

The authors' code needs a separate profiling run that writes ``profile.ratio.init``
and a file at decode time. Here profiling happens just before fairseq builds its
``Trainer``: the model exists with its initial parameters, but the fp16 conversion,
the fp32 master copies, the optimizer and the DDP wrapper do not yet, so nothing
overwrites the profiled omega. It is skipped whenever fairseq is about to load a
checkpoint (resume, ``--finetune-from-model``); ``fairseq-generate`` builds no
Trainer and never profiles. Every rank profiles the same batches (one unsharded
iterator, the run's seed) and omega is then broadcast from rank 0, so all ranks
start identical.
"""
import json
import logging
import os
import time

import torch
from fairseq import utils

from fairseq_layernorm_plugins.models.transformer_admin import admin_profiled_omegas

logger = logging.getLogger(__name__)


def profile_admin_(model, batches):
    """Run ``batches`` (fairseq samples) through ``model`` in train mode with omega = 1,
    set each layer's omega from the variances, and return the per-sub-layer report."""
    stacks = model.admin_layers()
    with torch.no_grad():
        for layers in stacks.values():
            for layer in layers:
                layer.omega.fill_(1.0)
                layer.profile_stats = []
        was_training = model.training
        model.train()  # the authors profile with dropout on
        try:
            for sample in batches:
                model(**sample["net_input"])
        finally:
            model.train(was_training)
        report = {}
        for stack, layers in stacks.items():
            input_vars, branch_vars, where = [], [], []
            for index, layer in enumerate(layers):
                stats, layer.profile_stats = layer.profile_stats, None
                for sub in range(layer.num_sublayers):
                    per_batch = stats[sub :: layer.num_sublayers]
                    input_vars.append(sum(v for v, _ in per_batch) / len(per_batch))
                    branch_vars.append(sum(v for _, v in per_batch) / len(per_batch))
                    where.append((index, sub))
            omegas = admin_profiled_omegas(input_vars, branch_vars)
            for (index, sub), omega in zip(where, omegas):
                layers[index].omega[sub].fill_(omega)
            report[stack] = [
                {"layer": i, "sublayer": s, "var_input": vx, "var_branch": vf, "omega": w}
                for (i, s), vx, vf, w in zip(where, input_vars, branch_vars, omegas)
            ]
    return report


def checkpoint_will_be_loaded(checkpoint_cfg):
    """Mirror of fairseq's ``checkpoint_utils.load_checkpoint`` path resolution."""
    if checkpoint_cfg.restore_file == "checkpoint_last.pt":
        path = os.path.join(checkpoint_cfg.save_dir, f"checkpoint_last{checkpoint_cfg.checkpoint_suffix}.pt")
        return os.path.exists(path) or bool(checkpoint_cfg.finetune_from_model)
    return os.path.exists(checkpoint_cfg.restore_file)


def profiling_batches(cfg, task, model, num_batches):
    """The first ``num_batches`` training batches of epoch 1, the same on every rank."""
    subset = cfg.dataset.train_subset
    task.load_dataset(subset, epoch=1, combine=True)
    iterator = task.get_batch_iterator(
        dataset=task.dataset(subset),
        max_tokens=cfg.dataset.max_tokens,
        max_sentences=cfg.dataset.batch_size,
        max_positions=(model.max_positions()),
        ignore_invalid_inputs=True,
        required_batch_size_multiple=cfg.dataset.required_batch_size_multiple,
        seed=cfg.common.seed,
        num_shards=1,
        shard_id=0,
        epoch=1,
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
    args = getattr(model, "args", None)
    if not hasattr(model, "admin_layers") or getattr(args, "admin_init", None) != "profile":
        return
    if checkpoint_will_be_loaded(cfg.checkpoint):
        logger.info("Admin: omega comes from the checkpoint to be loaded; not profiling")
        return
    if torch.cuda.is_available() and not cfg.common.cpu:
        model.cuda()
    for layers in model.admin_layers().values():
        for layer in layers:
            layer.profile_mask_padding = args.admin_profile_mask_padding
    start = time.perf_counter()
    report = profile_admin_(model, profiling_batches(cfg, task, model, args.admin_profile_batches))
    seconds = time.perf_counter() - start
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        for layers in model.admin_layers().values():
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
        with open(args.admin_profile_json, "w") as f:
            json.dump({"seconds": seconds, "batches": args.admin_profile_batches, **report}, f, indent=1)


def install_trainer_hook():
    """Run :func:`maybe_profile` at the start of fairseq's ``Trainer.__init__``."""
    from fairseq.trainer import Trainer

    original = Trainer.__init__
    if getattr(original, "admin_profiling", False):
        return

    def __init__(self, cfg, task, model, criterion, *args, **kwargs):
        maybe_profile(cfg, task, model)
        original(self, cfg, task, model, criterion, *args, **kwargs)

    __init__.admin_profiling = True
    __init__.__doc__ = original.__doc__
    Trainer.__init__ = __init__
