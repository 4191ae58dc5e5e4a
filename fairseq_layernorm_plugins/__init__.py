"""fairseq plugins for research on LayerNorm placement and Transformer initialisation.

Use as ``fairseq-train --user-dir fairseq_layernorm_plugins --arch transformer_preln ...``
(and the same ``--user-dir`` for ``fairseq-generate``). Importing the package
registers every model, architecture, optimizer and LR scheduler with fairseq.

Layout:
    models/        one module per method (Pre-LN, ...) over ``models/base.py``
    modules/       the shared layer/encoder/decoder subclasses built on fairseq's hooks
    optim/         optimizers (``radam``) and, in ``optim/lr_scheduler/``, LR schedules
"""

from fairseq_layernorm_plugins import _compat

_compat.check_fairseq()
_compat.apply("checkpoint_loading")
_compat.apply("bf16_without_tpu")
_compat.apply("numpy_compat_long")
_compat.apply("loader_thread_exit")
_compat.apply("audio_without_torchaudio")
_compat.apply("fp16_on_cpu")
_compat.apply("fp16_cpu_products")
_compat.apply("keep_last_batch")  # every model's, fairseq's own archs included

from fairseq_layernorm_plugins import models, optim  # noqa: E402,F401  (registers everything)

__version__ = "0.1.0"
