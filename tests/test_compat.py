"""Importing the plugin: supported fairseq only, with a one-line fix; checkpoints load."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import PLUGIN_DIR, TINY_MODEL, run_cli

from fairseq_layernorm_plugins._compat import fairseq_version_problem


@pytest.mark.parametrize("version", ["0.12.2", "0.12.3", "0.12.3.1"])
def test_supported_fairseq_versions(version):
    assert fairseq_version_problem(version) is None


@pytest.mark.parametrize("version", ["0.10.2", "0.13.0", "1.0.0a0"])
def test_unsupported_fairseq_version_names_the_fix(version):
    problem = fairseq_version_problem(version)
    assert version in problem and "setup_env.sh" in problem and "\n" not in problem


def _import_plugin_with(fake_fairseq_source, tmp_path):
    """Import the plugin in a fresh interpreter that sees a fake ``fairseq`` first."""
    (tmp_path / "fairseq").mkdir()
    (tmp_path / "fairseq" / "__init__.py").write_text(textwrap.dedent(fake_fairseq_source))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-c", "import fairseq_layernorm_plugins"], capture_output=True, text=True, env=env
    )


def test_import_fails_in_one_line_on_an_old_fairseq(tmp_path):
    proc = _import_plugin_with("__version__ = '0.10.2'\n", tmp_path)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("fairseq_layernorm_plugins._compat.UnsupportedFairseqError: ")
    assert "found fairseq 0.10.2" in last and "scripts/setup_env.sh" in last


def test_import_fails_in_one_line_without_fairseq(tmp_path):
    proc = _import_plugin_with("raise ModuleNotFoundError(\"No module named 'fairseq'\", name='fairseq')\n", tmp_path)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "fairseq is not installed" in last and "scripts/setup_env.sh" in last


IMPORT_THEN_LOAD = """
import argparse, os, pickle, sys
import torch

torch.save({"args": argparse.Namespace(arch="transformer")}, sys.argv[1])  # as fairseq checkpoints
before = torch.serialization.get_safe_globals()
import fairseq_layernorm_plugins  # noqa: F401

print(os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"))
print(torch.serialization.get_safe_globals() == before)
try:
    torch.load(sys.argv[1])
    print("loaded")
except pickle.UnpicklingError:
    print("refused")
"""


def test_importing_the_plugin_leaves_torch_load_as_it_is(tmp_path):
    """Importing the plugin neither sets ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` (which would
    let every ``torch.load`` of the process run pickled code) nor allows any type for the
    process's own loads: a Namespace is refused by torch's default, as without the plugin.
    fairseq's own checkpoint reads allow what fairseq stores (tests/test_safe_loading.py)."""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"}
    code = [sys.executable, "-c", IMPORT_THEN_LOAD, str(tmp_path / "namespace.pt")]
    out = subprocess.run(code, capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["None", "True", "refused"], out.stderr[-2000:]


@pytest.mark.parametrize("n, multiple", [(100, 8), (7, 8), (43, 8), (64, 8), (10, 1)])
def test_every_sentence_is_batched(n, multiple):
    """fairseq main drops the last n % 8 sentences of every split; the plugin restores them."""
    import numpy as np
    from fairseq.data import data_utils

    from fairseq_layernorm_plugins import _compat

    _compat.apply("keep_last_batch")  # what importing the plugin does

    for tokens in (10, 200):  # one batch, or several cut by --max-tokens
        batches = data_utils.batch_by_size(
            np.arange(n, dtype=np.int64),
            lambda i, tokens=tokens: tokens,
            max_tokens=4000,
            required_batch_size_multiple=multiple,
        )
        assert np.concatenate(batches).tolist() == list(range(n))
        assert all(len(b) % multiple == 0 for b in batches[:-1])


def test_fairseq_datasets_use_the_fix(tiny_data_bin):
    """The path fairseq-generate takes: a real dataset's batch_by_size, 43 test sentences."""
    from fairseq import options, tasks

    args = options.parse_args_and_arch(
        options.get_training_parser(), [str(tiny_data_bin), "--arch", "transformer_postln"]
    )
    task = tasks.setup_task(args)
    task.build_model(args)  # a plugin model: the fix is on from here
    task.load_dataset("valid")  # 80 sentences: 80 % 8 == 0, so also check a prefix of 43
    dataset = task.dataset("valid")
    batches = dataset.batch_by_size(np.arange(43, dtype=np.int64), max_tokens=4000, required_batch_size_multiple=8)
    assert sum(len(b) for b in batches) == 43


@pytest.mark.parametrize(
    "cuda, flags, tpu, cpu",
    [
        (True, ["--bf16"], False, False),  # the GPU
        (False, ["--bf16"], False, True),  # the CPU
        (True, ["--bf16", "--cpu"], False, True),  # the CPU, asked for
        (True, ["--fp16"], False, False),  # untouched
    ],
)
def test_bf16_trains_on_the_gpu_or_cpu_not_a_tpu(cuda, flags, tpu, cpu, tiny_data_bin, monkeypatch):
    """fairseq's parser makes --bf16 imply --tpu; without torch_xla the run goes to the GPU
    when there is one (and no --cpu), else to the CPU."""
    import torch
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils

    import fairseq_layernorm_plugins  # noqa: F401  (installs the fix)

    args = options.parse_args_and_arch(
        options.get_training_parser(), [str(tiny_data_bin), "--arch", "transformer", *flags]
    )
    cfg = convert_namespace_to_omegaconf(args)
    assert cfg.common.tpu == ("--bf16" in flags)  # fairseq's own parsing
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    seen = []
    distributed_utils.call_main(
        cfg, lambda c: seen.append((c.common.tpu, c.distributed_training.tpu, c.common.cpu, c.common.bf16))
    )
    assert seen == [(tpu, tpu, cpu, "--bf16" in flags)]


def translated_lines(data_bin, arch, tmp_path, env=None, name=None):
    """Train ``arch`` for one update, then count the hypotheses of ``fairseq-generate --user-dir
    fairseq_layernorm_plugins`` for the 40 test sentences in batches of 6 (fairseq main drops
    the last 4). The run is saved in ``tmp_path / name`` (default: the arch)."""
    save = tmp_path / (name or arch)
    plugin = ["--user-dir", str(PLUGIN_DIR)]
    run_cli(
        "fairseq-train",
        data_bin,
        *plugin,
        "--arch",
        arch,
        *TINY_MODEL,
        "--optimizer",
        "adam",
        "--lr",
        "1e-3",
        "--max-tokens",
        "500",
        "--max-update",
        "1",
        "--cpu",
        "--save-dir",
        save,
        "--no-epoch-checkpoints",
        cwd=tmp_path,
        env=env,
    )
    out = run_cli(
        "fairseq-generate",
        data_bin,
        *plugin,
        "--path",
        save / "checkpoint_last.pt",
        "--gen-subset",
        "test",
        "--batch-size",
        "6",
        "--beam",
        "1",
        "--max-len-b",
        "5",
        "--cpu",
        cwd=tmp_path,
        env=env,
    )
    return sum(line.startswith("H-") for line in out.splitlines())


def test_fairseqs_own_transformer_translates_every_sentence_under_the_plugin(tiny_data_bin, tmp_path):
    """``--user-dir fairseq_layernorm_plugins`` keeps the last batch for every model, stock
    ``--arch transformer`` (what an Admin checkpoint exported to Post-LN decodes as) too."""
    assert translated_lines(tiny_data_bin, "transformer", tmp_path) == 40  # a plugin arch's: tests/test_safe_loading.py
    off = {**os.environ, "FAIRSEQ_LAYERNORM_PLUGINS_NO_PATCH": "keep_last_batch"}
    dropped = translated_lines(tiny_data_bin, "transformer", tmp_path, env=off, name="off")
    if dropped == 40:
        pytest.skip("this fairseq keeps the last batch itself")
    assert dropped == 36  # fairseq main's own batching, which the switch gives back


def test_importing_the_plugin_keeps_the_last_batch_before_any_model_is_built():
    """``--user-dir`` imports the plugin before fairseq reads any data: from then on every
    split keeps its last batch, whatever the model (``transformer_lm``, ``s2t_transformer``,
    ...): 43 sentences in batches of a multiple of 8."""
    code = (
        "import numpy as np, fairseq_layernorm_plugins\n"
        "from fairseq.data import data_utils\n"
        "batches = data_utils.batch_by_size(np.arange(43), lambda i: 1, max_sentences=16, "
        "required_batch_size_multiple=8)\n"
        "print(sum(len(b) for b in batches))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["43"], out.stderr[-2000:]


def test_unknown_patch_name_is_refused(monkeypatch):
    from fairseq_layernorm_plugins import _compat

    monkeypatch.setenv(_compat.SWITCH, "keep_last_batch,keep-last-batch")
    with pytest.raises(ValueError, match="unknown patch keep-last-batch"):
        _compat.patch_enabled("keep_last_batch")


def test_token_blocks_build_under_numpy_2():
    """A language model's inference data (``TokenBlockDataset``, break mode eos, as
    fairseq-interactive builds it) reads ``np.compat.long``, gone in NumPy 2: built here."""
    import numpy as np
    import torch
    from fairseq.data import TokenBlockDataset

    sentences = [torch.tensor([4, 5, 2]), torch.tensor([6, 2]), torch.tensor([7, 8, 9, 2])]
    blocks = TokenBlockDataset(sentences, np.array([3, 2, 4]), block_size=None, pad=1, eos=2, break_mode="eos")
    assert [blocks[i].tolist() for i in range(len(blocks))] == [s.tolist() for s in sentences]


READ_AHEAD_AT_EXIT = """
import atexit
import sys

import torch
from fairseq.data import iterators
import fairseq_layernorm_plugins  # noqa: F401


class Endless:
    def __len__(self):
        return 10**9

    def __iter__(self):
        x = torch.randn(400, 400)
        while True:
            yield x @ x  # the read-ahead thread spends its time in torch, outside the GIL


batches = iterators.BufferedIterator(int(sys.argv[1]), Endless())
next(batches)  # the run is over; its read-ahead thread is still reading
if sys.argv[2:] == ["report"]:  # the exit hooks now, then whether the thread is still there
    atexit._run_exitfuncs()
    print("alive" if batches._consumer.is_alive() else "stopped")
"""


def read_ahead_at_exit(*args, **env):
    """Run READ_AHEAD_AT_EXIT with ``args`` (queue size, "report"), ``env`` added to ours."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    return subprocess.run([sys.executable, "-c", READ_AHEAD_AT_EXIT, *args], capture_output=True, text=True, env=env)


def test_a_process_ends_cleanly_while_fairseq_still_reads_ahead():
    """fairseq's read-ahead thread caught inside torch at shutdown aborts the process (exit 134,
    "terminate called without an active exception") after the run is done: with
    ``loader_thread_exit`` the thread stops first and the process exits 0."""
    unpatched = read_ahead_at_exit("1000", FAIRSEQ_LAYERNORM_PLUGINS_NO_PATCH="loader_thread_exit")
    if unpatched.returncode == 0:  # glibc's forced unwind through torch is what aborts (Python 3.11)
        pytest.skip("this Python and torch end a daemon thread inside torch without aborting")
    assert unpatched.returncode == -6 and "terminate called" in unpatched.stderr, unpatched.stderr[-2000:]
    for _ in range(3):
        patched = read_ahead_at_exit("1000")
        assert patched.returncode == 0, patched.stderr[-2000:]


def test_the_exit_hook_stops_a_thread_waiting_for_room_in_its_queue():
    """A full queue (size 1): the thread waits in ``put``; the hook empties the queue and the
    thread ends before the interpreter shuts down."""
    proc = read_ahead_at_exit("1", "report")
    assert proc.returncode == 0 and proc.stdout.split() == ["stopped"], proc.stdout + proc.stderr[-2000:]
    unpatched = read_ahead_at_exit("1", "report", FAIRSEQ_LAYERNORM_PLUGINS_NO_PATCH="loader_thread_exit")
    assert unpatched.stdout.split() == ["alive"], unpatched.stdout + unpatched.stderr[-2000:]


def test_checkpoint_patches_share_one_trainer_wrapper_however_often_applied():
    """``patience_resume`` and ``wall_resume`` both keep state in a checkpoint's extra state;
    applied at every model build, in either order, they share one wrapper of
    ``Trainer.save_checkpoint`` / ``load_checkpoint`` (a process that builds many models must
    not stack wrappers until recursion fails), each registered under its extra-state key."""
    from fairseq.trainer import Trainer

    from fairseq_layernorm_plugins import _compat

    def depth(method):
        n = 0
        while hasattr(method, "__wrapped__"):
            method, n = method.__wrapped__, n + 1
        return n

    for _ in range(5):
        for name in ("wall_resume", "patience_resume"):
            _compat.apply(name)
    assert (depth(Trainer.load_checkpoint), depth(Trainer.save_checkpoint)) == (1, 1)
    assert {"wall", "patience"} <= set(_compat._EXTRA_STATE)


def test_fairseq_reads_raw_audio_without_torchaudio(speech_data, tmp_path):
    """A manifest may list FLAC files instead of features: fairseq then calls torchaudio's sox
    effects and Kaldi fbank, and the torchaudio beside torch 2.13 fails to load (OSError). Under
    the plugin the features are kaldi-native-fbank's, the same as the prepared ones; what fairseq
    asks sox to resample is refused in one line."""
    import soundfile
    from fairseq.data.audio import audio_utils
    from helpers.librispeech_fixture import utterances

    from fairseq_layernorm_plugins.prepare.fbank import fbank

    utterance = utterances()[0]
    flac = tmp_path / f"{utterance.id}.flac"
    samples, rate = soundfile.read(utterance.wav, dtype="int16")
    soundfile.write(flac, samples, rate, format="FLAC", subtype="PCM_16")
    rows = [line.split("\t") for line in (speech_data / f"{utterance.split}.tsv").read_text().splitlines()]
    audio = next(row[1] for row in rows if row[0] == utterance.id)  # fbank80.zip:OFFSET:LENGTH
    prepared = audio_utils.get_features_or_waveform(str(speech_data / audio))
    np.testing.assert_array_equal(audio_utils.get_features_or_waveform(str(flac)), prepared)
    stereo = tmp_path / "stereo.wav"  # sox's "channels 1": the channels' mean
    soundfile.write(stereo, np.stack([samples, np.zeros_like(samples)], axis=1), rate, subtype="PCM_16")
    mono, _ = soundfile.read(utterance.wav, dtype="float32")
    np.testing.assert_allclose(audio_utils.get_features_or_waveform(str(stereo)), fbank(mono / 2, rate), atol=1e-4)
    with pytest.raises(RuntimeError, match="resampling 16000 Hz to 8000 Hz"):
        audio_utils.get_waveform(str(flac), output_sample_rate=8000)
    with pytest.raises(RuntimeError, match="volume normalisation"):
        audio_utils.get_waveform(str(flac), normalize_volume=True)
