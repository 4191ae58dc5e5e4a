"""``--lr-scheduler inverse_sqrt_nowarmup``: T-Fixup's schedule (Huang et al. 2020).

Starts at the peak learning rate and decays as the inverse square root of
``D + t``; used with T-Fixup's initialisation, which needs no warm-up.
"""

import math
from collections.abc import Collection
from dataclasses import dataclass, field

from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II


def inverse_sqrt_nowarmup_lr(lr, decay_period, num_updates):
    """lr_t = lr * sqrt(D / (D + t)) (T-Fixup authors' fairseq scheduler; t = updates done)."""
    return lr * math.sqrt(decay_period / (decay_period + num_updates))


@dataclass
class InverseSqrtNoWarmupConfig(FairseqDataclass):
    decay_period: int = field(
        default=4000,
        metadata={"help": "D in lr_t = lr * sqrt(D / (D + t)); T-Fixup uses 4000"},
    )
    lr: list[float] = II("optimization.lr")


@register_lr_scheduler("inverse_sqrt_nowarmup", dataclass=InverseSqrtNoWarmupConfig)
class InverseSqrtNoWarmupSchedule(FairseqLRScheduler):
    def __init__(self, cfg: InverseSqrtNoWarmupConfig, optimizer):
        super().__init__(cfg, optimizer)
        if isinstance(cfg.lr, Collection) and len(cfg.lr) > 1:
            raise ValueError("inverse_sqrt_nowarmup takes a single --lr")
        if cfg.decay_period <= 0:
            raise ValueError(f"--decay-period must be positive, got {cfg.decay_period}")
        self.peak_lr = cfg.lr[0] if isinstance(cfg.lr, Collection) else cfg.lr
        self.step_update(0)

    def step_update(self, num_updates):
        self.lr = inverse_sqrt_nowarmup_lr(self.peak_lr, self.cfg.decay_period, num_updates)
        self.optimizer.set_lr(self.lr)
        return self.lr
