"""What the plugin needs from its environment (a supported fairseq) and every change it
makes to fairseq's own behaviour, each named:

* ``checkpoint_loading`` (torch >= 2.6, any fairseq): torch loads with ``weights_only=True``
  and fairseq checkpoints pickle ``argparse.Namespace`` objects (and, with ``--eval-bleu``,
  NumPy arrays), so fairseq refuses its own checkpoints. fairseq's checkpoint reads
  (``checkpoint_utils.load_checkpoint_to_cpu`` and ``load_ema_from_checkpoint``) now load
  with ``weights_only=True`` always, allowing the few data types fairseq stores
  (:func:`checkpoint_globals`) for that load only; a checkpoint that would run code when
  unpickled is refused, ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` or not. The state a
  data-parallel resume sends from rank 0 to the others
  (``distributed.utils._broadcast_object_slow``) is read with the same allow-list. Applied
  on import; nothing else in the process changes how ``torch.load`` works (no environment
  variable, no type allowed outside those loads).
* ``bf16_without_tpu`` (fairseq 0.12.x): ``--bf16`` implies ``--tpu``, so a bf16 run on a
  GPU or a CPU dies importing torch_xla. Applied on import; it changes only runs that would
  fail.
* ``fp16_on_cpu`` (fairseq 0.12.x): ``--cpu --fp16`` dies building the flat fp32 master
  copy (``torch.cuda.current_device()``) and on the first gradient overflow
  (``torch.tensor(0.0).cuda()``); ``--cpu --amp`` silently trains in fp32. Applied on
  import; it changes only runs without CUDA.
* ``fp16_cpu_products`` (any fairseq): a CPU without fp16 arithmetic multiplies fp16
  matrices several times slower than fp32 ones, so an fp16 run on a CPU spends most of its
  time there. An fp16 training or validation step on a CPU, and beam search with an fp16
  model on a CPU, compute their matrix products (and fused attention) in fp32 from the fp16
  inputs and round the results to fp16, as a GPU's fp16 kernels do
  (``cpu_fp16.HalfProductsInFloat``). Applied on import; it changes only fp16 runs on a CPU
  that has no fp16 arithmetic of its own.
* ``numpy_compat_long`` (fairseq 0.12.x with NumPy >= 2): ``TokenBlockDataset`` (a language
  model's data at inference: ``fairseq-interactive``, ``--sample-break-mode eos``) and
  ``LanguagePairDataset.get_batch_shapes`` read ``np.compat.long``, which NumPy 2 removed, and
  die with an AttributeError. Those two modules see a NumPy that has it again (int64, NumPy
  1.x's ``np.compat.long`` on Linux). Applied on import; it changes only runs that would fail.
* ``loader_thread_exit`` (fairseq 0.12.x): fairseq reads batches ahead in a daemon thread
  (``iterators.BackgroundConsumer``). A run that ends while that thread is inside torch
  (``--max-update`` or ``--patience`` stopping it mid-epoch) leaves it there, and Python's
  shutdown ends it mid-call: the process aborts ("terminate called without an active
  exception", exit 134) after the run has finished and saved, and a batch scheduler marks the
  job failed. At exit, before the interpreter shuts down, each such thread now finishes the
  batch it is reading and stops. Applied on import; it changes only how a process ends.
* ``audio_without_torchaudio`` (fairseq 0.12.x, torch >= 2.9): fairseq reads raw audio
  (a speech manifest listing ``.flac`` / ``.wav`` files, or ``S2THubInterface``) through
  torchaudio: ``get_waveform`` imports ``torchaudio.sox_effects`` even when there is nothing to
  convert, and ``get_fbank`` computes filter banks with ``torchaudio.compliance.kaldi``. No
  torchaudio release matches torch 2.13 (the one pip installs beside fairseq fails to load
  with an ``OSError``), and none has had ``sox_effects`` since 2.9. The waveform is now taken
  as read where no conversion is asked for (mono audio at its own rate; several channels are
  averaged, as sox's ``channels 1``), the filter banks are kaldi-native-fbank's
  (``prepare/fbank.py``, the same features as torchaudio's Kaldi fbank), and a resampling or
  volume normalisation fairseq asks for is refused in one line. Applied on import; it changes
  only what would fail (no torchaudio with sox effects exists for the torch this package
  pins).
* ``keep_last_batch`` (fairseq 0.12.3 / main, so fairseq-fixed): ``batch_by_size`` drops
  the last batch of every split (up to 7 sentences). Applied on import, so it holds for
  every model run with ``--user-dir fairseq_layernorm_plugins``, fairseq's own archs
  (``transformer``, ``transformer_lm``, a checkpoint exported from Admin) included.
* ``resume_batches`` (fairseq 0.12.3 / main, so fairseq-fixed): the training set is cut into
  batches with the seed plus the epoch at which its batch iterator is made. A run started at
  epoch 1 makes it once and keeps those batches (only their order changes with the epoch);
  a run resumed from ``checkpointE.pt`` makes it at epoch E + 1 and trains on batches of
  other sentences from there on, so it does not reproduce the uninterrupted run (fairseq's
  own test_reproducibility fails, stock ``transformer`` included). Applied when one of the
  plugin's models is built.
* ``patience_resume`` (fairseq 0.12.x): ``--patience N`` counts validations without
  improvement in attributes of ``fairseq_cli.train.should_stop_early`` that no checkpoint
  keeps, so a resumed run forgets its best validation loss and its count, and trains up to
  N validations longer than the uninterrupted run. This keeps both in the checkpoint's
  extra state and restores them on resume. Applied when one of the plugin's models is built.
* ``wall_resume`` (fairseq 0.12.x): the ``wall`` clock in fairseq-train's logs (seconds since
  the run began) is a stopwatch that is started and never stopped, so a checkpoint saves it
  as 0 and a resumed run logs ``"wall": "0"`` from the first line on: the run's time is lost
  at every resume. This keeps the seconds at the save in the checkpoint's extra state
  (``wall``) and starts the clock from them on resume, so ``wall`` is the time the saved
  model took to train (work done after the last save and lost with the process is not
  counted). Applied when one of the plugin's models is built.
* ``resume_finished`` (fairseq 0.12.x): fairseq-train checks ``--max-update`` and
  ``--patience`` only after an update, so a run resumed from the checkpoint it ended with
  (a requeued batch job, an experiment run again) trains one more update, or on to the next
  validation, overwrites ``checkpoint_last.pt`` and ends with another model than the one it
  had. A run resumed at its ``--max-update``, or with its patience spent (as
  ``patience_resume`` restores it), now ends at once. Applied when one of the plugin's
  models is built.
* ``bf16_decoding`` (fairseq 0.12.x): ``fairseq-generate``, ``fairseq-interactive`` and
  ``fairseq-eval-lm`` cast the model to half for ``--fp16`` only, so with ``--bf16`` they
  decode in fp32 and say nothing. A plugin model is cast to bf16 in its
  ``prepare_for_inference_``, which all three call after their own cast (with their
  ``--path``; ``from_pretrained`` leaves the model as loaded). Applies to the plugin's
  models only.

* ``admin_profiling`` (any fairseq): fairseq has no hook between building the model and
  building its ``Trainer`` (which converts it to fp16, copies fp32 masters, builds the
  optimizer and wraps DDP), where Admin profiles omega. This wraps ``Trainer.__init__`` to
  call ``admin_profiling.maybe_profile(cfg, task, model)`` first, a no-op for any model that
  does not profile. Applied when a model with ``--admin-init profile`` is built; turned off,
  such a model refuses to build, in one line.

Turn any of them off with ``FAIRSEQ_LAYERNORM_PLUGINS_NO_PATCH=name[,name...]`` (or
``all``).
"""

import contextlib
import functools
import logging
import os
import sys

# fairseq 0.12.2 (official, Python < 3.11) and fairseq-fixed 0.12.3.1 (fairseq main with
# the Python 3.11 fixes; it reports its version as 0.12.3) are the supported releases.
SUPPORTED_FAIRSEQ = ("0.12.2", "0.12.3")
INSTALL_HINT = "run `bash scripts/setup_env.sh` (or `pip install -e '.[fairseq]'` in this repository)"


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


PATCHES = (
    "checkpoint_loading",
    "bf16_without_tpu",
    "fp16_on_cpu",
    "fp16_cpu_products",
    "numpy_compat_long",
    "loader_thread_exit",
    "audio_without_torchaudio",
    "keep_last_batch",
    "resume_batches",
    "patience_resume",
    "wall_resume",
    "resume_finished",
    "bf16_decoding",
    "admin_profiling",
)
SWITCH = "FAIRSEQ_LAYERNORM_PLUGINS_NO_PATCH"


def patch_enabled(name):
    """False when ``name`` (one of :data:`PATCHES`) is turned off by the user (:data:`SWITCH`)."""
    off = {item.strip() for item in os.environ.get(SWITCH, "").split(",") if item.strip()}
    unknown = off - set(PATCHES) - {"all"}
    if unknown:
        raise ValueError(f"{SWITCH}: unknown patch {', '.join(sorted(unknown))} (known: {', '.join(PATCHES)}, all)")
    return name not in off and "all" not in off


def apply(name, *args):
    """Apply patch ``name`` (with ``args``, what it calls) unless the user turned it off;
    applying twice is harmless. ``bf16_decoding`` is no wrapper: the plugin's models ask
    :func:`patch_enabled` themselves."""
    if patch_enabled(name):
        {
            "checkpoint_loading": checkpoint_loading,
            "bf16_without_tpu": bf16_without_tpu,
            "fp16_on_cpu": fp16_on_cpu,
            "fp16_cpu_products": fp16_cpu_products,
            "numpy_compat_long": numpy_compat_long,
            "loader_thread_exit": loader_thread_exit,
            "audio_without_torchaudio": audio_without_torchaudio,
            "keep_last_batch": keep_last_batch,
            "resume_batches": resume_batches,
            "patience_resume": patience_resume,
            "wall_resume": wall_resume,
            "resume_finished": resume_finished,
            "admin_profiling": admin_profiling,
        }[name](*args)


def checkpoint_globals():
    """What fairseq's checkpoints pickle besides tensors and plain containers, as the list
    ``torch.serialization.safe_globals`` takes: data types whose unpickling runs no code of
    the file's choosing.

    * ``argparse.Namespace``: a checkpoint's ``cfg["model"]`` (and ``args``) for argparse
      archs, fairseq's ``transformer`` and every plugin arch among them;
    * NumPy arrays, dtypes and scalars (``--eval-bleu``'s counts in the saved meters), under
      NumPy 2's module names and NumPy 1's, arrays of Python objects excepted;
    * omegaconf's containers and nodes, ``typing.Any``, ``collections.defaultdict`` and the
      builtins it names: a loaded checkpoint's ``cfg`` as fairseq holds it (a ``DictConfig``),
      which a data-parallel resume sends from rank 0 to the other ranks, and a checkpoint
      that saved its ``cfg`` unconverted;
    * ``fairseq.distributed.utils._TensorPlaceholder``: where that message had its tensors.
    """
    import argparse
    import collections
    import typing

    import numpy
    from fairseq.distributed import utils as distributed_utils
    from omegaconf import base, dictconfig, listconfig, nodes

    multiarray = numpy._core.multiarray if hasattr(numpy, "_core") else numpy.core.multiarray
    allowed = [
        argparse.Namespace,
        numpy.ndarray,
        numpy.dtype,  # and the class of each dtype but object's (an array of objects is refused)
        *sorted({type(numpy.dtype(code)) for code in numpy.typecodes["All"] if code != "O"}, key=str),
        *[
            (getattr(multiarray, name), f"{module}.multiarray.{name}")
            for name in ("_reconstruct", "scalar")
            for module in ("numpy._core", "numpy.core")
        ],
        dictconfig.DictConfig,
        listconfig.ListConfig,
        base.ContainerMetadata,
        base.Metadata,
        nodes.AnyNode,
        nodes.StringNode,
        nodes.IntegerNode,
        nodes.FloatNode,
        nodes.BooleanNode,
        (typing.Any, "typing.Any"),  # named: before Python 3.11 typing.Any has no __qualname__
        collections.defaultdict,
        dict,
        list,
        int,
        distributed_utils._TensorPlaceholder,
    ]
    return allowed


@contextlib.contextmanager
def fairseq_checkpoint_globals():
    """Within: ``torch.load(..., weights_only=True)`` accepts :func:`checkpoint_globals` too.
    Only what was not allowed before is added, and taken away again on leaving."""
    from torch import serialization

    before = serialization.get_safe_globals()
    added = [item for item in checkpoint_globals() if item not in before]
    with serialization.safe_globals(added):
        yield


def load_checkpoint(f, map_location="cpu", **kwargs):
    """``torch.load(f, weights_only=True)`` of a fairseq checkpoint (a path or a file):
    tensors, plain containers and :func:`checkpoint_globals` only; anything else (a pickle
    that would call a function) is refused with ``pickle.UnpicklingError``. ``kwargs``
    (``mmap=True``, ...) go to ``torch.load``."""
    import torch

    kwargs["weights_only"] = True
    with fairseq_checkpoint_globals():
        return torch.load(f, map_location=map_location, **kwargs)


class _TorchLoadingCheckpoints:
    """torch as it is, but ``load`` is :func:`load_checkpoint` (always ``weights_only=True``,
    whatever the caller or ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` says): the ``torch`` that
    ``fairseq.checkpoint_utils`` sees."""

    def __init__(self, torch):
        self._torch = torch

    def __getattr__(self, name):
        return getattr(self._torch, name)

    def load(self, f, map_location=None, **kwargs):
        kwargs.pop("weights_only", None)
        return load_checkpoint(f, map_location=map_location, **kwargs)


def checkpoint_loading():
    """fairseq's checkpoint reads load safely (``weights_only=True``) with the types fairseq
    stores allowed for that load only (module docstring); applying twice is harmless."""
    from fairseq import checkpoint_utils
    from fairseq.distributed import utils as distributed_utils

    if not isinstance(checkpoint_utils.torch, _TorchLoadingCheckpoints):
        checkpoint_utils.torch = _TorchLoadingCheckpoints(checkpoint_utils.torch)
    receive = distributed_utils._broadcast_object_slow
    if not getattr(receive, "checkpoint_loading", False):

        @functools.wraps(receive)
        def _broadcast_object_slow(*args, **kwargs):
            with fairseq_checkpoint_globals():
                return receive(*args, **kwargs)

        _broadcast_object_slow.checkpoint_loading = True
        distributed_utils._broadcast_object_slow = _broadcast_object_slow


class _NumpyWithCompat:
    """NumPy as it is, plus the ``np.compat.long`` NumPy 2 removed (int64)."""

    def __init__(self, numpy):
        import types

        self._numpy = numpy
        self.compat = types.SimpleNamespace(long=numpy.int64)

    def __getattr__(self, name):
        return getattr(self._numpy, name)


def numpy_compat_long():
    """Give fairseq's two readers of ``np.compat.long`` a NumPy that has it (module docstring)."""
    import numpy
    from fairseq.data import language_pair_dataset, token_block_dataset

    if hasattr(numpy, "compat"):  # NumPy 1.x: nothing to do
        return
    for module in (token_block_dataset, language_pair_dataset):
        if not isinstance(module.np, _NumpyWithCompat):
            module.np = _NumpyWithCompat(module.np)


def audio_without_torchaudio():
    """fairseq's raw-audio reading without torchaudio (module docstring)."""
    from fairseq.data.audio import audio_utils

    if getattr(audio_utils.convert_waveform, "_without_torchaudio", False):
        return

    def convert_waveform(waveform, sample_rate, normalize_volume=False, to_mono=False, to_sample_rate=None):
        """fairseq's ``convert_waveform`` (C, T) -> (C', T) for what needs no torchaudio."""
        if normalize_volume or (to_sample_rate is not None and to_sample_rate != sample_rate):
            asked = (
                "volume normalisation" if normalize_volume else f"resampling {sample_rate} Hz to {to_sample_rate} Hz"
            )
            raise RuntimeError(
                f"fairseq asks torchaudio's sox effects for {asked}, and no torchaudio release for this torch has "
                "them: give audio at the rate the model reads, or features (fairseq-ln-prepare librispeech)"
            )
        if to_mono and waveform.shape[0] > 1:
            waveform = waveform.mean(axis=0, keepdims=True)  # sox "channels 1": the channels' mean
        return waveform, sample_rate

    def torchaudio_fbank(waveform, sample_rate, n_bins=80):
        """``waveform`` (1, T) at 16-bit scale, as fairseq's ``get_fbank`` passes it -> (frames, n_bins)."""
        from fairseq_layernorm_plugins.prepare.fbank import fbank

        return fbank(waveform.squeeze(0) / 2**15, sample_rate, num_bins=n_bins)

    from fairseq.models.speech_to_text import hub_interface  # bound convert_waveform at its import

    convert_waveform._without_torchaudio = True
    audio_utils.convert_waveform = hub_interface.convert_wav = convert_waveform
    audio_utils._get_torchaudio_fbank = torchaudio_fbank


def loader_thread_exit(timeout=10.0):
    """Stop fairseq's read-ahead threads at exit, before the interpreter shuts down (module
    docstring): each ``BackgroundConsumer`` reads its source through a generator that fetches
    nothing more once the process exits, and its queue is emptied so that a ``put`` waiting
    for room returns. Gives up after ``timeout`` seconds (a thread left then ends as it would
    have). ``--data-buffer-size 0`` (fairseq's) avoids the thread altogether."""
    import atexit
    import queue
    import threading
    import time

    from fairseq.data import iterators

    consumer_cls = iterators.BackgroundConsumer
    if getattr(consumer_cls.__init__, "loader_thread_exit", False):
        return
    exiting = threading.Event()
    init, run = consumer_cls.__init__, consumer_cls.run

    def until_exit(source):
        iterator = iter(source)
        while not exiting.is_set():
            try:
                item = next(iterator)
            except StopIteration:
                return
            yield item

    def __init__(self, queue, source, *args, **kwargs):
        init(self, queue, until_exit(source), *args, **kwargs)

    def run_then_release(self):
        try:
            run(self)
        finally:
            self._source = None  # the source's iterator (a DataLoader's workers) goes when run() ends, as before

    def stop_consumers():
        exiting.set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            alive = [thread for thread in threading.enumerate() if isinstance(thread, consumer_cls)]
            if not alive:
                return
            for thread in alive:
                try:
                    while True:
                        thread._queue.get_nowait()
                except queue.Empty:
                    pass
            alive[0].join(0.05)

    __init__.loader_thread_exit = True
    consumer_cls.__init__, consumer_cls.run = __init__, run_then_release
    atexit.register(stop_consumers)


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
    installed only if the running fairseq shows the behaviour, on import (``--user-dir``
    imports the plugin before any batch iterator exists), so it holds for every model:
    the plugin's archs and fairseq's own, in ``fairseq-train``, ``fairseq-generate``,
    ``fairseq-validate`` and ``fairseq-eval-lm`` alike.
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


def _wrap_call_main(name, adjust):
    """Wrap ``distributed_utils.call_main`` (what ``fairseq-train`` and ``fairseq-hydra-train``
    start through) so that ``adjust(cfg)`` runs first; once per ``name``."""
    from fairseq.distributed import utils as distributed_utils

    original = distributed_utils.call_main
    if name in getattr(original, "patches", ()):
        return

    def call_main(cfg, main, **kwargs):
        adjust(cfg)
        return original(cfg, main, **kwargs)

    call_main.patches = (*getattr(original, "patches", ()), name)
    call_main.__doc__ = original.__doc__
    distributed_utils.call_main = call_main


def _batches_depend_on_start_epoch(get_batch_iterator):
    """True if ``get_batch_iterator`` (``FairseqTask``'s) cuts a dataset whose order is random
    into other batches when its iterator is made at epoch 2 than at epoch 1."""
    import numpy as np
    from fairseq.data import FairseqDataset
    from fairseq.tasks import FairseqTask

    class Shuffled(FairseqDataset):
        def __getitem__(self, index):
            return index

        def __len__(self):
            return 64

        def num_tokens(self, index):
            return 1

        def size(self, index):
            return 1

        def ordered_indices(self):
            return np.random.permutation(len(self))

    def batches(epoch):
        iterator = get_batch_iterator(FairseqTask(None), Shuffled(), max_sentences=8, seed=1, epoch=epoch)
        return [list(batch) for batch in iterator.frozen_batches]

    return batches(1) != batches(2)


def resume_batches():
    """Cut the training set into the same batches whatever epoch a run starts at (fairseq main).

    fairseq main's ``FairseqTask.get_batch_iterator`` orders the dataset for batching under
    ``numpy_seed(seed + epoch)`` (fairseq 0.12.2: ``seed``), ``epoch`` being the one the
    iterator is made at. ``fairseq-train`` makes the training iterator once and reuses it
    for every later epoch, so an uninterrupted run trains on epoch 1's batches throughout;
    a run resumed at epoch E makes its iterator at E, and its batches hold other sentences
    (same-length sentences are ordered at random). This wrapper makes every iterator's
    batches those of epoch 1, as an uninterrupted run has them, and leaves the shuffling
    of the batches in each epoch (``seed + epoch``) as it is; an uninterrupted run is
    unchanged. ``--rebuild-batches`` (batches cut again every epoch) is left alone.
    """
    import inspect

    from fairseq.tasks import FairseqTask

    original = FairseqTask.get_batch_iterator
    if getattr(original, "resume_batches", False) or not _batches_depend_on_start_epoch(original):
        return
    signature = inspect.signature(original)

    def get_batch_iterator(self, *args, **kwargs):
        call = signature.bind(self, *args, **kwargs)
        call.apply_defaults()
        seed, epoch, dataset = call.arguments["seed"], call.arguments["epoch"], call.arguments["dataset"]
        if epoch == 1 or getattr(self.cfg, "rebuild_batches", False):
            return original(*call.args, **call.kwargs)
        cached = self.dataset_to_epoch_iter.get(dataset)
        call.arguments["seed"] = seed + 1 - epoch  # batches ordered under seed + 1, as at epoch 1
        iterator = original(*call.args, **call.kwargs)
        if iterator is not cached:
            iterator.seed = seed  # each epoch's order of the batches: seed + epoch, as before
        return iterator

    get_batch_iterator.__doc__ = original.__doc__
    get_batch_iterator.resume_batches = True
    FairseqTask.get_batch_iterator = get_batch_iterator


# Checkpoint extra-state key -> (save: () -> value or None, restore: value -> None), one per patch.
_EXTRA_STATE = {}


def _keep_in_checkpoints(key, save, restore):
    """Put ``save()`` into every checkpoint's extra state as ``key`` (unless it is None) and
    call ``restore(value)`` when a checkpoint holding it is loaded to resume.

    One wrapper of ``Trainer.save_checkpoint`` / ``load_checkpoint`` serves every patch that
    registers here (``patience_resume``, ``wall_resume``), installed once however often a
    patch is applied. A load is a resume when it restores the optimizer and the meters, as
    fairseq restores ``save_checkpoint.best`` and its meters only then.
    """
    import inspect

    from fairseq.trainer import Trainer

    _EXTRA_STATE[key] = (save, restore)
    if getattr(Trainer.save_checkpoint, "extra_state_hooks", False):
        return
    save_checkpoint, load_checkpoint = Trainer.save_checkpoint, Trainer.load_checkpoint
    load_signature = inspect.signature(load_checkpoint)

    def save_with_extra_state(self, filename, extra_state):
        kept = {name: value for name, (kept_value, _) in _EXTRA_STATE.items() if (value := kept_value()) is not None}
        return save_checkpoint(self, filename, {**extra_state, **kept})

    def load_with_extra_state(self, filename, *args, **kwargs):
        extra_state = load_checkpoint(self, filename, *args, **kwargs)
        call = load_signature.bind(self, filename, *args, **kwargs)
        call.apply_defaults()
        if extra_state and not (call.arguments["reset_optimizer"] or call.arguments["reset_meters"]):
            for name, (_, restore) in _EXTRA_STATE.items():
                if name in extra_state:
                    restore(extra_state[name])
        return extra_state

    for wrapper, original in ((save_with_extra_state, save_checkpoint), (load_with_extra_state, load_checkpoint)):
        functools.update_wrapper(wrapper, original)
        wrapper.extra_state_hooks = True
    Trainer.save_checkpoint, Trainer.load_checkpoint = save_with_extra_state, load_with_extra_state


def _early_stopping():
    """fairseq-train's ``should_stop_early`` (its state lives in the function's attributes),
    or None outside fairseq-train."""
    train = sys.modules.get("fairseq_cli.train")
    return getattr(train, "should_stop_early", None)


def patience_resume():
    """Keep ``--patience``'s state (best validation loss, validations since) in checkpoints.

    fairseq-train validates, updates ``should_stop_early.best`` / ``.num_runs``, then saves;
    the two go into the checkpoint's extra state as ``patience`` and are set back on resume,
    so a resumed run stops at the validation the uninterrupted run stops at.
    """

    def save():
        stop = _early_stopping()
        if stop is not None and getattr(stop, "best", None) is not None:
            return {"best": stop.best, "num_runs": stop.num_runs}
        return None

    def restore(patience):
        stop = _early_stopping()
        if stop is not None:
            stop.best, stop.num_runs = patience["best"], patience["num_runs"]

    _keep_in_checkpoints("patience", save, restore)


def wall_resume():
    """Keep fairseq-train's ``wall`` clock across a resume (see the module docstring).

    fairseq's ``wall`` meter (``metrics.get_meter("default", "wall")``, a ``StopwatchMeter``)
    reports ``perf_counter() - start_time``; its saved state has no start, so a loaded one
    reads 0. The seconds at the save go into the extra state as ``wall``, and a resume sets
    ``start_time`` that many seconds back.
    """
    import time

    from fairseq.logging import metrics

    def save():
        wall = metrics.get_meter("default", "wall")
        return None if wall is None else wall.elapsed_time

    def restore(seconds):
        wall = metrics.get_meter("default", "wall")
        if wall is not None:
            wall.start_time = time.perf_counter() - seconds

    _keep_in_checkpoints("wall", save, restore)


def resume_finished():
    """End a fairseq-train run at once when it resumes finished (see the module docstring):
    wraps ``fairseq_cli.train.train`` (one epoch), which ``main`` calls by its module name."""
    train = sys.modules.get("fairseq_cli.train")
    if train is None or getattr(train.train, "resume_finished", False):
        return
    one_epoch = train.train

    def finished(cfg, trainer):
        """Why the run has nothing left to train, or None."""
        updates, most = trainer.get_num_updates(), cfg.optimization.max_update
        if most and updates >= most:
            return f"num_updates: {updates} >= max_update: {most}"
        patience, stop = cfg.checkpoint.patience, train.should_stop_early
        if patience > 0 and updates > 0 and getattr(stop, "num_runs", 0) >= patience:
            return f"--patience {patience} spent before the checkpoint"
        return None

    def train_one_epoch(cfg, trainer, task, epoch_itr):
        why = finished(cfg, trainer)
        if why:
            logging.getLogger("fairseq_cli.train").info(f"Stopping training at once (resumed finished): {why}")
            return [None], True
        return one_epoch(cfg, trainer, task, epoch_itr)

    train_one_epoch.__doc__ = one_epoch.__doc__
    train_one_epoch.resume_finished = True
    train.train = train_one_epoch


def admin_profiling(profile):
    """Call ``profile(cfg, task, model)`` (``admin_profiling.maybe_profile``) at the start of
    fairseq's ``Trainer.__init__`` (see the module docstring)."""
    from fairseq.trainer import Trainer

    original = Trainer.__init__
    if getattr(original, "admin_profiling", False):
        return

    def __init__(self, cfg, task, model, criterion, *args, **kwargs):
        profile(cfg, task, model)
        original(self, cfg, task, model, criterion, *args, **kwargs)

    __init__.admin_profiling = True
    __init__.__doc__ = original.__doc__
    Trainer.__init__ = __init__


def bf16_without_tpu():
    """Let ``--bf16`` train on a GPU or a CPU (fairseq 0.12.x).

    fairseq's argument parsing turns ``--bf16`` into ``--tpu`` (``options.py``: "use
    bfloat16; implies --tpu"), so a ``--bf16`` run imports ``torch_xla`` and dies. When
    torch_xla is not installed, such a run trains on the GPU (CUDA there and no ``--cpu``),
    otherwise on the CPU: the model and batches in bfloat16 with fp32 master weights and no
    loss scaling (fairseq's own ``FP16Optimizer`` bf16 path, flat or not). A run that would
    have worked (a real TPU) is left as it is.
    """
    import importlib.util

    import torch

    def adjust(cfg):
        common = cfg.common
        if common.bf16 and common.tpu and importlib.util.find_spec("torch_xla") is None:
            common.tpu = cfg.distributed_training.tpu = False  # the latter is a copy after argparse
            if not torch.cuda.is_available():
                common.cpu = True

    _wrap_call_main("bf16_without_tpu", adjust)


def fp16_on_cpu():
    """Let ``--fp16`` train on a CPU (fairseq 0.12.x), as it does on a GPU.

    Three CUDA-only spots of fairseq's fp16 path, each changed only where no CUDA device
    is used:

    * ``FP16Optimizer.build_fp32_params`` keys the flat fp32 master copy by
      ``torch.cuda.current_device()``; on a CPU it is keyed by the parameters' device index
      (None), which is what fairseq's gradient and parameter copies look it up by.
    * ``Trainer.train_step`` sets the skipped update's gradient norm to
      ``torch.tensor(0.0).cuda()`` after a gradient overflow (the loss scale is lowered and
      the update skipped); on a CPU run that tensor stays on the CPU.
    * ``--amp`` (torch.cuda.amp) on a CPU trains in fp32 with a loss scale of 1 without
      saying so: it is refused in one line pointing to ``--fp16`` / ``--bf16``.
    """
    import contextlib

    import torch
    from fairseq.optim import fp16_optimizer
    from fairseq.trainer import Trainer

    mixin = fp16_optimizer._FP16OptimizerMixin
    build = mixin.__dict__["build_fp32_params"].__func__
    if not getattr(build, "fp16_on_cpu", False):

        def build_fp32_params(cls, args, params, flatten=True):
            if not flatten or params[0].device.type == "cuda":
                return build(cls, args, params, flatten=flatten)
            flat = torch.nn.Parameter(torch.cat([p.data.reshape(-1).float() for p in params]))
            flat.grad = torch.zeros_like(flat.data)
            return {params[0].device.index: flat}

        build_fp32_params.fp16_on_cpu = True
        build_fp32_params.__doc__ = build.__doc__
        mixin.build_fp32_params = classmethod(build_fp32_params)

    @contextlib.contextmanager
    def tensors_stay_on_cpu():
        cuda = torch.Tensor.cuda
        torch.Tensor.cuda = lambda tensor, *args, **kwargs: tensor
        try:
            yield
        finally:
            torch.Tensor.cuda = cuda

    train_step = Trainer.train_step
    if not getattr(train_step, "fp16_on_cpu", False):

        def cpu_train_step(self, samples, raise_oom=False):
            if self.cuda or self.tpu or not self.cfg.common.fp16:
                return train_step(self, samples, raise_oom)
            with tensors_stay_on_cpu():  # the overflow branch's torch.tensor(0.0).cuda()
                return train_step(self, samples, raise_oom)

        cpu_train_step.fp16_on_cpu = True
        cpu_train_step.__doc__ = train_step.__doc__
        Trainer.train_step = cpu_train_step

    def refuse_amp_on_cpu(cfg):
        if cfg.common.amp and (cfg.common.cpu or not torch.cuda.is_available()):
            raise SystemExit(
                "fairseq: --amp is torch.cuda.amp and trains in fp32 without a CUDA device; "
                "on a CPU use --fp16 or --bf16"
            )

    _wrap_call_main("fp16_on_cpu", refuse_amp_on_cpu)


def fp16_cpu_products():
    """Compute an fp16 run's matrix products in fp32 on a CPU without fp16 arithmetic.

    ``Trainer.train_step`` and ``Trainer.valid_step`` of an ``--fp16`` run without CUDA, and
    ``SequenceGenerator.generate`` (``fairseq-generate``, ``--eval-bleu``; with
    ``SequenceGeneratorWithAlignment``'s own) with an fp16 model on the CPU, run inside
    :class:`cpu_fp16.HalfProductsInFloat`: fp16 inputs, fp32 accumulation, fp16 results, what
    the CPU's own fp16 kernels compute, several times faster. A CPU that has fp16 arithmetic
    (:func:`cpu_fp16.native_fp16_products`) keeps torch's kernels. ``generate`` and not
    ``_generate`` is wrapped: TorchScript compiles ``_generate`` (``forward`` calls it).
    """
    import functools

    import torch
    from fairseq.sequence_generator import SequenceGenerator, SequenceGeneratorWithAlignment
    from fairseq.trainer import Trainer

    from fairseq_layernorm_plugins import cpu_fp16

    def products_in_float(method, half_on_cpu):
        if getattr(method, "fp16_cpu_products", False):
            return method

        @functools.wraps(method)
        def wrapped(self, *args, **kwargs):
            if not half_on_cpu(self) or cpu_fp16.native_fp16_products() or cpu_fp16.active():
                return method(self, *args, **kwargs)
            with cpu_fp16.HalfProductsInFloat():
                return method(self, *args, **kwargs)

        wrapped.fp16_cpu_products = True
        return wrapped

    def fp16_trainer_on_cpu(trainer):
        return trainer.cfg.common.fp16 and not trainer.cuda and not trainer.tpu

    def fp16_model_on_cpu(generator):
        weight = next(generator.model.parameters(), None)
        return weight is not None and weight.dtype == torch.float16 and weight.device.type == "cpu"

    Trainer.train_step = products_in_float(Trainer.train_step, fp16_trainer_on_cpu)
    Trainer.valid_step = products_in_float(Trainer.valid_step, fp16_trainer_on_cpu)
    for generator in (SequenceGenerator, SequenceGeneratorWithAlignment):
        generator.generate = products_in_float(generator.generate, fp16_model_on_cpu)
