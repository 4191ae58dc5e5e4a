"""Depth (Huang et al. 2020, Sec. 4): a 24L-24L T-Fixup model at d=64 trains without warm-up;
Post-LN of the same shape, on the same schedule, does not. docs/depth_stability.md shows the same
at 50L-50L over 300 updates; a step costs about as much per layer whatever the width, so the test
takes fewer layers and updates (24L-24L, 100 updates of 500 tokens: about a minute). There, on one
thread, T-Fixup went from 5.24 (mean of updates 1-10) to 3.35 (91-100) and Post-LN from 5.04 to
4.68, flat from update 60 on; at 20L-20L Post-LN began to learn (4.99 to 4.30 by update 120), so
fewer layers would no longer show it stall."""

import json
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import depth_stability  # noqa: E402


@pytest.mark.slow(1.5)
def test_24_layer_tfixup_trains_where_post_ln_stalls(tmp_path, tiny_data_bin):
    """T-Fixup's loss falls by more than 1.0 (last 10 updates against the first 10); Post-LN's
    does not (or becomes NaN), and ends at least 0.5 above T-Fixup's; every update is logged.
    On the suite's toy reversal data-bin (``tiny_data_bin``: the data the script makes without
    ``--data``, binarised once per test process)."""
    argv = ["--layers", "24", "--dim", "64", "--max-update", "100", "--max-tokens", "500"]
    summary = depth_stability.main([*argv, "--data", str(tiny_data_bin), "--out", str(tmp_path)])
    tfixup, post_ln = summary["transformer_tfixup"], summary["transformer"]
    assert tfixup["status"] == "trains", tfixup  # last-10 mean at least 1.0 below the first-10 mean
    assert post_ln["status"] in ("stalls", "diverged"), post_ln
    assert tfixup["last10"] < post_ln["last10"] - 0.5
    curves = json.loads((tmp_path / "curves.json").read_text())["curves"]
    assert all(len(c) == 100 for c in curves.values())
    assert (tmp_path / "curves.png").stat().st_size > 0
