"""Depth (Huang et al. 2020, Sec. 4): a 30L-30L T-Fixup model at d=64 trains without warm-up;
Post-LN of the same shape, on the same schedule, does not. docs/depth_stability.md shows the same
at 50L-50L over 300 updates; a step costs about as much per layer whatever the width, so the test
takes fewer layers and updates: about 1-2 minutes (500-token batches)."""

import json
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import depth_stability  # noqa: E402


@pytest.mark.slow(1.5)
def test_30_layer_tfixup_trains_where_post_ln_stalls(tmp_path):
    summary = depth_stability.main(
        ["--layers", "30", "--dim", "64", "--max-update", "120", "--max-tokens", "500", "--out", str(tmp_path)]
    )
    tfixup, post_ln = summary["transformer_tfixup"], summary["transformer"]
    assert tfixup["status"] == "trains", tfixup  # last-10 mean at least 1.0 below the first-10 mean
    assert post_ln["status"] in ("stalls", "diverged"), post_ln
    assert tfixup["last10"] < post_ln["last10"] - 0.5
    curves = json.loads((tmp_path / "curves.json").read_text())["curves"]
    assert all(len(c) == 120 for c in curves.values())
    assert (tmp_path / "curves.png").stat().st_size > 0
