"""Optimizers and LR schedules of the papers' recipes, registered with fairseq."""

from fairseq_layernorm_plugins.optim import adam_foreach, lr_scheduler, radam  # noqa: F401
