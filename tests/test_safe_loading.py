"""fairseq checkpoints load safely with the plugin: torch's ``weights_only=True`` with the few
types fairseq stores allowed, never an unpickler that runs what the file says (issue 80).

A checkpoint that would run code is refused by the commands a user types; real checkpoints
(an Admin run with ``--eval-bleu``, so NumPy arrays in its meters) resume, decode, load as an
ensemble and resume on two data-parallel ranks, none of it with
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` in the environment."""

import os
import pickle
import re
import subprocess
import sys

import pytest
import torch
from conftest import BIN, PLUGIN_DIR, TINY_MODEL, _run_in_process, run_cli

UNSAFE = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
SAFE_ENV = {**{k: v for k, v in os.environ.items() if k != UNSAFE}, "OMP_NUM_THREADS": "1"}
ARCH = "transformer_admin_iwslt_de_en"


class Payload:
    """Unpickled, it writes ``marker``: by ``exec`` (a builtin) or ``os.system``."""

    def __init__(self, marker, how):
        self.marker, self.how = str(marker), how

    def __reduce__(self):
        if self.how == "exec":
            return exec, (f"open({self.marker!r}, 'w').write('ran')",)
        return os.system, (f"touch '{self.marker}'",)


def malicious_checkpoint(tmp_path, how="exec"):
    """(path, marker): a checkpoint whose ``cfg`` runs code when unpickled."""
    marker = tmp_path / f"pwned-{how}"
    path = tmp_path / f"evil-{how}.pt"
    torch.save({"args": None, "cfg": Payload(marker, how), "model": {}}, path)
    return path, marker


@pytest.mark.parametrize("how", ["exec", "os.system"])
@pytest.mark.parametrize("forced", [False, True], ids=["as-imported", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1"])
def test_fairseqs_checkpoint_loading_refuses_a_pickle_that_runs_code(tmp_path, monkeypatch, how, forced):
    """``checkpoint_utils.load_checkpoint_to_cpu`` (resume, fairseq-generate, the hub) in a
    process that imported the plugin, its environment as the import left it: refused,
    nothing run; even with the variable a user may still have set from older advice."""
    from fairseq import checkpoint_utils

    import fairseq_layernorm_plugins  # noqa: F401

    if forced:
        monkeypatch.setenv(UNSAFE, "1")
    path, marker = malicious_checkpoint(tmp_path, how)
    with pytest.raises(pickle.UnpicklingError):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    with pytest.raises(pickle.UnpicklingError):
        checkpoint_utils.load_model_ensemble([str(path)])
    assert not marker.exists()


def test_fairseq_generate_and_train_refuse_a_pickle_that_runs_code(tiny_data_bin, tmp_path, monkeypatch):
    """The commands: ``fairseq-generate --path`` and ``fairseq-train --restore-file`` with
    ``--user-dir fairseq_layernorm_plugins`` stop with an UnpicklingError; the marker the
    pickle would write never appears. fairseq-train is a fresh process with the unsafe
    variable set before anything is imported; fairseq-generate runs its ``cli_main`` in this
    process (as ``run_cli`` runs it), without the variable."""
    path, marker = malicious_checkpoint(tmp_path)
    plugin = ["--user-dir", str(PLUGIN_DIR)]
    generate = [BIN / "fairseq-generate", tiny_data_bin, *plugin, "--path", path, "--gen-subset", "test", "--cpu"]
    monkeypatch.delenv(UNSAFE, raising=False)
    code, out = _run_in_process("fairseq_cli.generate", [str(arg) for arg in generate], None)
    assert code != 0
    assert "UnpicklingError" in out, out[-3000:]
    assert not marker.exists(), "fairseq-generate"
    train = [BIN / "fairseq-train", tiny_data_bin, *plugin, "--arch", "transformer_postln", *TINY_MODEL]
    train += ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "500", "--max-update", "1", "--cpu"]
    train += ["--save-dir", tmp_path / "resume", "--restore-file", path]
    proc = subprocess.run(
        [str(arg) for arg in train],
        capture_output=True,
        text=True,
        env={**SAFE_ENV, UNSAFE: "1"},
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "UnpicklingError" in proc.stderr, proc.stderr[-3000:]
    assert not marker.exists(), "fairseq-train"


TRAIN = [
    "--user-dir",
    PLUGIN_DIR,
    "--arch",
    ARCH,
    *TINY_MODEL,
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--max-tokens",
    "2000",
    "--cpu",
]
TRAIN += ["--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 5}', "--best-checkpoint-metric", "bleu"]
TRAIN += ["--maximize-best-checkpoint-metric", "--no-progress-bar", "--seed", "1"]


@pytest.fixture(scope="module")
def trained(tiny_data_bin, tmp_path_factory):
    """(data-bin, save dir): one epoch of Admin, validated with --eval-bleu, saved as
    ``checkpoint1.pt`` and ``checkpoint_last.pt``, without the unsafe variable (fairseq-train's
    ``cli_main`` in this process: the checkpoints are what the tests read)."""
    save = tmp_path_factory.mktemp("safe_loading") / "ckpt"
    with pytest.MonkeyPatch.context() as env:
        env.delenv(UNSAFE, raising=False)
        run_cli("fairseq-train", tiny_data_bin, *TRAIN, "--max-epoch", "1", "--save-dir", save, in_process=True)
    return tiny_data_bin, save


def test_real_checkpoints_hold_what_torch_refuses_by_default(trained):
    """What the loads below must allow (else they would prove nothing): the argparse
    Namespace of ``cfg["model"]`` and --eval-bleu's NumPy arrays; torch's own default
    refuses them in this process, the plugin imported."""
    _, save = trained
    unsafe = set(torch.serialization.get_unsafe_globals_in_checkpoint(save / "checkpoint1.pt"))
    assert "argparse.Namespace" in unsafe and any(name.endswith("multiarray._reconstruct") for name in unsafe)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(save / "checkpoint1.pt")


def test_a_real_checkpoint_resumes(trained, tmp_path, monkeypatch):
    """fairseq-train's ``cli_main`` in this process (its per-run state reset, ``run_cli``),
    without the unsafe variable; a fresh process resumes on two ranks below."""
    data_bin, save = trained
    resumed = tmp_path / "ckpt"
    resumed.mkdir()
    (resumed / "checkpoint_last.pt").write_bytes((save / "checkpoint1.pt").read_bytes())
    monkeypatch.delenv(UNSAFE, raising=False)
    log = run_cli(
        "fairseq-train",
        data_bin,
        *(*TRAIN, "--max-epoch", "2", "--save-dir", resumed),
        in_process=True,
    )
    assert re.search(r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch 2 @ \d+ updates\)", log), log[-3000:]
    assert (resumed / "checkpoint2.pt").is_file()


def test_a_real_checkpoint_decodes_with_fairseq_generate(trained, monkeypatch):
    """fairseq-generate's ``cli_main`` in this process (``run_cli``), without the unsafe variable."""
    data_bin, save = trained
    monkeypatch.delenv(UNSAFE, raising=False)
    out = run_cli(
        "fairseq-generate",
        data_bin,
        *("--user-dir", PLUGIN_DIR, "--path", save / "checkpoint1.pt", "--gen-subset", "test"),
        *("--beam", "1", "--max-len-b", "5", "--batch-size", "6", "--cpu"),
    )
    assert sum(line.startswith("H-") for line in out.splitlines()) == 40  # the last batch (4) kept too


def test_a_real_checkpoint_loads_as_an_ensemble(trained, monkeypatch):
    """In-process, as a user's script or fairseq's hub does it."""
    from fairseq import checkpoint_utils

    from fairseq_layernorm_plugins.models.transformer_admin import TransformerAdminModel

    monkeypatch.delenv(UNSAFE, raising=False)
    _, save = trained
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(save / "checkpoint1.pt")])
    assert type(models[0]) is TransformerAdminModel and cfg.model.arch == ARCH
    state = checkpoint_utils.load_checkpoint_to_cpu(str(save / "checkpoint_last.pt"))
    assert state["extra_state"]["metrics"]  # the meters, NumPy arrays among them


def test_a_real_checkpoint_resumes_on_two_data_parallel_ranks(trained, tmp_path):
    """Rank 0 reads the checkpoint and sends it (its cfg now a DictConfig) to rank 1
    (``distributed_utils.broadcast_object``): rank 1 reads it with the same allow-list."""
    data_bin, save = trained
    resumed = tmp_path / "ckpt"
    resumed.mkdir()
    (resumed / "checkpoint_last.pt").write_bytes((save / "checkpoint1.pt").read_bytes())
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29541"]
    cmd += [str(PLUGIN_DIR.parent / "tests" / "helpers" / "train_and_dump.py"), str(data_bin)]
    cmd += ["--user-dir", str(PLUGIN_DIR), "--arch", ARCH, *TINY_MODEL, "--optimizer", "adam", "--lr", "1e-3"]
    cmd += ["--max-tokens", "2000", "--cpu", "--max-epoch", "2", "--disable-validation", "--no-progress-bar"]
    cmd += ["--save-dir", str(resumed)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**SAFE_ENV, "DUMP_DIR": str(tmp_path)}, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "Loaded checkpoint" in log and "(epoch 2 @" in log
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    for key, value in ranks[0].items():
        torch.testing.assert_close(ranks[1][key], value, rtol=0, atol=0, msg=key)
