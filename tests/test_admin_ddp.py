"""Admin on 2 CPU processes (gloo, legacy_ddp): both ranks profile, start and end identical."""

import os
import subprocess
import sys

import pytest
import torch
from conftest import PLUGIN_DIR, TINY_MODEL


def test_two_process_run_ends_identical(tiny_data_bin, tmp_path):
    env = {**os.environ, "DUMP_DIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        "29517",
        str(PLUGIN_DIR.parent / "tests" / "helpers" / "train_and_dump.py"),
        str(tiny_data_bin),
        "--user-dir",
        str(PLUGIN_DIR),
        "--arch",
        "transformer_admin_iwslt_de_en",
        *TINY_MODEL,
        "--optimizer",
        "radam",
        "--lr",
        "3e-3",
        "--max-tokens",
        "500",
        "--max-update",
        "10",
        "--cpu",
        "--seed",
        "1",
        "--save-dir",
        str(tmp_path / "ckpt"),
        "--no-save",
        "--disable-validation",
        "--no-progress-bar",
        "--admin-profile-json",
        str(tmp_path / "profile.json"),
        "--log-format",
        "simple",
        "--log-interval",
        "5",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    log = proc.stdout + proc.stderr
    if proc.returncode:
        pytest.fail(log[-4000:])
    # fairseq logs at INFO on rank 0 only; rank 1's profiling shows in its identical omega
    assert "Admin: profiled 1 batch(es)" in log and "num_updates 10" in log
    assert "as rank 0" in log and "as rank 1" in log, "one gloo process group of two ranks"
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    omega_keys = [k for k in ranks[0] if k.endswith("omega")]
    assert omega_keys and any(not torch.all(ranks[0][k] == 1) for k in omega_keys)
    for key, value in ranks[0].items():
        torch.testing.assert_close(ranks[1][key], value, rtol=0, atol=0, msg=key)
