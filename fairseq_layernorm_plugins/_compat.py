"""What the plugin needs from its environment (a supported fairseq) and every change it
makes to fairseq's own behaviour, each named:

* ``checkpoint_loading`` (torch >= 2.6, any fairseq): torch loads with ``weights_only=True``
  and fairseq checkpoints pickle Namespace / omegaconf objects, so they fail to load.
  Applied on import (an environment variable; the user's own setting wins).
* ``bf16_on_cuda`` (fairseq 0.12.x): ``--bf16`` implies ``--tpu``, so a bf16 run on a GPU
  dies importing torch_xla. Applied on import; it changes only runs that would fail.
* ``keep_last_batch`` (fairseq 0.12.3 / main, so fairseq-fixed): ``batch_by_size`` drops
  the last batch of every split (up to 7 sentences). Applied when one of the plugin's
  models is built, so fairseq's own archs batch as without the plugin.

Turn any of them off with ``FAIRSEQ_LAYERNORM_PLUGINS_NO_PATCH=name[,name...]`` (or
``all``). Admin's profiling hook on fairseq's ``Trainer`` is the method itself, not a
fix, and is installed when an Admin model is built (``admin_profiling.py``).
"""

import os
import sys

# fairseq 0.12.2 (official, Python < 3.11) and fairseq-fixed 0.12.3.1 (fairseq main with
# the Python 3.11 fixes; it reports its version as 0.12.3) are the supported releases.
SUPPORTED_FAIRSEQ = ("0.12.2", "0.12.3")
INSTALL_HINT = "run `bash scripts/setup_env.sh` (or `pip install -e .` in this repository)"


class UnsupportedFairseqError(ImportError):
    """Raised on import when fairseq is missing or is a release the plugin was not built for."""


def fairseq_version_problem(version):
    """Return a one-line explanation if ``version`` (a string, or None if missing) is unsupported."""
    wanted = "fairseq-fixed==0.12.3.1" if sys.version_info >= (3, 11) else "fairseq==0.12.2"
    if version is None:
        return f"fairseq_layernorm_plugins needs {wanted}, but fairseq is not installed: {INSTALL_HINT}"
    release = ".".join(version.split("+")[0].split(".")[:3])
    if release not in SUPPORTED_FAIRSEQ:
        return (
            f"fairseq_layernorm_plugins needs {wanted} (fairseq {' or '.join(SUPPORTED_FAIRSEQ)}), "
            f"found fairseq {version}: {INSTALL_HINT}"
        )
    return None


def check_fairseq():
    try:
        import fairseq
    except ImportError as err:
        if getattr(err, "name", None) not in (None, "fairseq"):
            raise  # fairseq is there but one of its own imports failed: show that error
        problem = fairseq_version_problem(None)
    else:
        problem = fairseq_version_problem(getattr(fairseq, "__version__", "unknown"))
    if problem:
        raise UnsupportedFairseqError(problem) from None


PATCHES = ("checkpoint_loading", "bf16_on_cuda", "keep_last_batch")
SWITCH = "FAIRSEQ_LAYERNORM_PLUGINS_NO_PATCH"


def patch_enabled(name):
    """False when ``name`` (one of :data:`PATCHES`) is turned off by the user (:data:`SWITCH`)."""
    off = {item.strip() for item in os.environ.get(SWITCH, "").split(",") if item.strip()}
    unknown = off - set(PATCHES) - {"all"}
    if unknown:
        raise ValueError(f"{SWITCH}: unknown patch {', '.join(sorted(unknown))} (known: {', '.join(PATCHES)}, all)")
    return name not in off and "all" not in off


def apply(name):
    """Apply patch ``name`` unless the user turned it off; applying twice is harmless."""
    if patch_enabled(name):
        {
            "checkpoint_loading": enable_fairseq_checkpoint_loading,
            "bf16_on_cuda": bf16_on_cuda,
            "keep_last_batch": keep_last_batch,
        }[name]()


def enable_fairseq_checkpoint_loading():
    """Let fairseq load its own checkpoints on torch >= 2.6.

    torch 2.6 made ``torch.load(weights_only=True)`` the default, and fairseq
    checkpoints pickle ``argparse.Namespace`` and omegaconf objects. torch reads this
    variable at load time; an explicit setting by the user wins.
    """
    os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")


def _drops_last_batch(batch_by_size):
    import numpy as np

    return len(batch_by_size(np.arange(3, dtype=np.int64), lambda i: 1, required_batch_size_multiple=8)) == 0


def keep_last_batch():
    """Undo fairseq main's dropping of the last batch (hence in fairseq-fixed 0.12.3.1).

    Since 0.12.2, ``fairseq.data.data_utils.batch_by_size`` discards the final batch when
    its size is not a multiple of ``--required-batch-size-multiple`` (default 8), so
    every split silently loses up to 7 sentences: ``fairseq-generate`` translates 6744
    of IWSLT14's 6750 test lines and 3000 of newstest2014's 3003, and BLEU is computed
    on an incomplete test set. This wrapper appends the dropped sentences as a last
    (smaller) batch, as fairseq 0.12.2 and the papers' fairseq 0.8/0.9 did. It is
    installed only if the running fairseq shows the behaviour, when a plugin model is
    built (``PluginTransformerModel.build_model``): before any batch iterator exists, in
    ``fairseq-train`` and ``fairseq-generate`` alike.
    """
    import numpy as np
    from fairseq.data import data_utils

    original = data_utils.batch_by_size
    if getattr(original, "keeps_last_batch", False) or not _drops_last_batch(original):
        return

    def batch_by_size(indices, *args, **kwargs):
        if not isinstance(indices, np.ndarray):
            indices = np.fromiter(indices, dtype=np.int64, count=-1)
        batches = original(indices, *args, **kwargs)
        covered = sum(len(b) for b in batches)
        if covered < len(indices):  # the dropped batch is always the tail
            batches = list(batches) + [indices[covered:]]
        return batches

    batch_by_size.__doc__ = original.__doc__
    batch_by_size.keeps_last_batch = True
    data_utils.batch_by_size = batch_by_size


def bf16_on_cuda():
    """Let ``--bf16`` train on a GPU (fairseq 0.12.x).

    fairseq's argument parsing turns ``--bf16`` into ``--tpu`` (``options.py``: "use
    bfloat16; implies --tpu"), so a ``--bf16`` run on a GPU imports ``torch_xla`` and
    dies. This wraps ``distributed_utils.call_main`` (what ``fairseq-train`` and
    ``fairseq-hydra-train`` start through) so that, when CUDA is there and torch_xla is
    not, such a run trains on the GPU instead: the model and batches in bfloat16 with fp32
    master weights and no loss scaling (fairseq's own ``FP16Optimizer`` bf16 path). A run
    that would have worked (a real TPU) is left as it is.
    """
    import importlib.util

    import torch
    from fairseq.distributed import utils as distributed_utils

    original = distributed_utils.call_main
    if getattr(original, "bf16_on_cuda", False):
        return

    def call_main(cfg, main, **kwargs):
        common = cfg.common
        if (
            common.bf16
            and common.tpu
            and not common.cpu
            and torch.cuda.is_available()
            and importlib.util.find_spec("torch_xla") is None
        ):
            common.tpu = cfg.distributed_training.tpu = False  # the latter is a copy after argparse
        return original(cfg, main, **kwargs)

    call_main.bf16_on_cuda = True
    call_main.__doc__ = original.__doc__
    distributed_utils.call_main = call_main
