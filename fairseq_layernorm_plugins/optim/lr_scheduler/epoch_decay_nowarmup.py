"""``--lr-scheduler epoch_decay_nowarmup``: the Pre-LN paper's schedule (Xiong et al.
2020, Sec. 4.1): no warm-up, a constant learning rate, multiplied by a factor from a
given epoch on, and optionally an inverse-square-root decay after that.

IWSLT14 De-En: ``--lr 5e-4 --decay-epoch 8 --decay-factor 0.1``.
WMT14 En-De: ``--lr 7e-4`` (or 1.5e-3) ``--decay-epoch 6 --inverse-sqrt-after-decay``
(the paper says "decayed at the 6-th epoch followed by the inverse square root
scheduler" and gives no factor: pass ``--decay-factor`` to add one).
"""

import math
from collections.abc import Collection
from dataclasses import dataclass, field

from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II


def epoch_decay_lr(lr, epoch, num_updates, decay_epoch, decay_factor, decay_start_update=None):
    """Pre-LN paper schedule (Xiong et al. 2020, Sec. 4.1).

    lr for ``epoch < decay_epoch``; ``lr * decay_factor`` from ``decay_epoch`` on; if
    ``decay_start_update`` (t_k, the update count when ``decay_epoch`` began) is given,
    additionally ``* sqrt(t_k / t)`` for t > t_k. Epochs are 1-based as in fairseq.
    """
    if epoch < decay_epoch:
        return lr
    lr = lr * decay_factor
    if decay_start_update is not None and num_updates > decay_start_update:
        lr *= math.sqrt(max(decay_start_update, 1) / num_updates)
    return lr


@dataclass
class EpochDecayNoWarmupConfig(FairseqDataclass):
    decay_epoch: int = field(
        default=8,
        metadata={"help": "first epoch (1-based) trained with the decayed lr (Pre-LN: 8 IWSLT14, 6 WMT14)"},
    )
    decay_factor: float = field(default=0.1, metadata={"help": "the lr is multiplied by this from --decay-epoch on"})
    inverse_sqrt_after_decay: bool = field(
        default=False,
        metadata={
            "help": "after the decay, also scale lr by sqrt(t_k / t), t_k = updates done when --decay-epoch began"
        },
    )
    lr: list[float] = II("optimization.lr")


@register_lr_scheduler("epoch_decay_nowarmup", dataclass=EpochDecayNoWarmupConfig)
class EpochDecayNoWarmupSchedule(FairseqLRScheduler):
    def __init__(self, cfg: EpochDecayNoWarmupConfig, optimizer):
        super().__init__(cfg, optimizer)
        if isinstance(cfg.lr, Collection) and len(cfg.lr) > 1:
            raise ValueError("epoch_decay_nowarmup takes a single --lr")
        if cfg.decay_epoch < 1:
            raise ValueError(f"--decay-epoch is 1-based, got {cfg.decay_epoch}")
        self.base_lr = cfg.lr[0] if isinstance(cfg.lr, Collection) else cfg.lr
        self.epoch = 1
        self.num_updates = 0
        self.decay_start_update: int | None = None  # t_k, saved in checkpoints
        self._set_lr()

    def _set_lr(self):
        self.lr = epoch_decay_lr(
            self.base_lr,
            self.epoch,
            self.num_updates,
            self.cfg.decay_epoch,
            self.cfg.decay_factor,
            self.decay_start_update if self.cfg.inverse_sqrt_after_decay else None,
        )
        self.optimizer.set_lr(self.lr)
        return self.lr

    def step_begin_epoch(self, epoch):
        self.epoch = epoch
        if epoch >= self.cfg.decay_epoch and self.decay_start_update is None:
            self.decay_start_update = self.num_updates
        return self._set_lr()

    def step(self, epoch, val_loss=None):
        super().step(epoch, val_loss)  # records the best validation loss only
        return self.optimizer.get_lr()

    def step_update(self, num_updates):
        self.num_updates = num_updates
        return self._set_lr()

    def state_dict(self):
        return {**super().state_dict(), "epoch": self.epoch, "decay_start_update": self.decay_start_update}

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self.epoch = state_dict.get("epoch", self.epoch)
        self.decay_start_update = state_dict.get("decay_start_update")
