"""LR schedules of the recipes; each formula is a small function shared with the tests."""

from fairseq_layernorm_plugins.optim.lr_scheduler import (  # noqa: F401
    epoch_decay_nowarmup,
    inverse_sqrt_nowarmup,
)
