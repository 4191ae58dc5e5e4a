"""benchmarks/profile_step.py: every operator's time lands in one category of its outermost op."""

import json
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import profile_step  # noqa: E402


@pytest.mark.parametrize(
    "name, expected",
    [
        ("aten::native_layer_norm", "LayerNorm"),
        ("NativeLayerNormBackward0", "LayerNorm"),
        ("aten::linear", "matmul"),
        ("AddmmBackward0", "matmul"),
        ("aten::scaled_dot_product_attention", "matmul"),
        ("aten::log_softmax", "embedding / loss"),
        ("LogSoftmaxBackward0", "embedding / loss"),
        ("aten::softmax", "softmax / attention mask"),
        ("aten::masked_fill", "softmax / attention mask"),
        ("aten::dropout", "dropout"),
        ("aten::addcmul_", "element-wise"),
        ("aten::t", "copies / layout"),
        ("aten::transpose", "copies / layout"),
        ("autograd::engine::evaluate_function: MmBackward0", "autograd engine"),
        ("aten::item", "other"),
    ],
)
def test_operator_categories(name, expected):
    assert profile_step.category(name) == expected


def test_profile_splits_a_step_and_tfixup_runs_no_layer_norm(tiny_data_bin, tmp_path):
    argv = [
        "--data",
        str(tiny_data_bin),
        "--archs",
        "transformer",
        "transformer_tfixup",
        "--layers",
        "1",
        "--dim",
        "32",
        "--batches",
        "1",
        "--reps",
        "1",
        "--warmup",
        "1",
        "--threads",
        "1",
        "--out",
        str(tmp_path / "profile"),
    ]
    results = profile_step.main(argv)
    for name, result in results.items():
        assert sum(result["shares"].values()) == pytest.approx(100), name
        assert result["shares"]["matmul"] > 0 and result["shares"][profile_step.OPTIMIZER] > 0, name
        assert all(profile_step.category(op) != "matmul" for op, _ in result["top"])
    assert results["transformer"]["shares"]["LayerNorm"] > 0
    assert "LayerNorm" not in results["transformer_tfixup"]["shares"]  # T-Fixup has none (Huang et al. 2020)
    assert json.loads((tmp_path / "profile.json").read_text()) == json.loads(json.dumps(results))
    table = (tmp_path / "profile.md").read_text()
    assert "| LayerNorm | " in table and "| transformer | transformer_tfixup |" in table
