"""fairseq plugins for research on LayerNorm placement and Transformer initialisation.

Use as ``fairseq-train --user-dir fairseq_layernorm_plugins --arch transformer_preln ...``
(and the same ``--user-dir`` for ``fairseq-generate``). Importing the package
registers every model, architecture, optimizer and LR scheduler with fairseq.

Layout:
    models/        one module per method (Pre-LN, ...) over ``models/base.py``
    modules/       the shared layer/encoder/decoder subclasses built on fairseq's hooks
    optim/         optimizers (``radam``) and, in ``optim/lr_scheduler/``, LR schedules
"""
from fairseq_layernorm_plugins._compat import (
    bf16_on_cuda,
    check_fairseq,
    enable_fairseq_checkpoint_loading,
    keep_last_batch,
)

enable_fairseq_checkpoint_loading()
check_fairseq()
keep_last_batch()
bf16_on_cuda()

from fairseq_layernorm_plugins import models, optim  # noqa: E402,F401  (registers everything)
from fairseq_layernorm_plugins.admin_profiling import install_trainer_hook  # noqa: E402

install_trainer_hook()

__version__ = "0.1.0"
