"""The benchmarks: profile_step.py puts every operator's time in one category of its outermost op;
throughput.py and decoding.py write their numbers as JSON (``--json``), which the harness reads;
cpu_precision.py times fairseq-train in each precision."""

import json
import shutil
import statistics
import sys

import pytest
from conftest import PLUGIN_DIR, REPO, TINY_MODEL, run_cli

from fairseq_layernorm_plugins import cpu_fp16
from fairseq_layernorm_plugins.experiments.experiment import run_benchmark

sys.path.insert(0, str(REPO / "benchmarks"))
import cpu_precision  # noqa: E402
import decoding  # noqa: E402
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
        host = result["host"]
        assert sum(host["shares"].values()) == pytest.approx(100), name
        assert host["shares"]["matmul"] > 0 and host["shares"][profile_step.OPTIMIZER] > 0, name
        assert all(profile_step.category(op) != "matmul" for op, _ in host["top"])
        assert "device" not in result and result["wall_ms"] > 0  # no GPU kernel table on a CPU
    assert results["transformer"]["host"]["shares"]["LayerNorm"] > 0
    assert "LayerNorm" not in results["transformer_tfixup"]["host"]["shares"]  # T-Fixup has none (Huang et al. 2020)
    assert json.loads((tmp_path / "profile.json").read_text()) == json.loads(json.dumps(results))
    table = (tmp_path / "profile.md").read_text()
    assert "| LayerNorm | " in table and "| transformer | transformer_tfixup |" in table


def test_throughput_writes_its_numbers_as_json_and_the_harness_reads_them(tiny_data_bin, tmp_path, capsys):
    """What scripts/gpu/check.py part c reads: benchmarks/throughput.py --json, run by the harness,
    which echoes the benchmark's progress as it comes."""
    argv = ["--data", str(tiny_data_bin), "--archs", "transformer_preln", "--layers", "1", "--dim", "32"]
    argv += ["--batches", "1", "--reps", "2", "--warmup", "1", "--threads", "1", "--device", "cpu", "--no-memory"]
    result = run_benchmark("throughput.py", argv, tmp_path / "numbers.json")
    assert "error" not in result, result
    assert result["command"].endswith(f"--json {tmp_path / 'numbers.json'}")
    assert json.loads((tmp_path / "numbers.json").read_text()) == {k: v for k, v in result.items() if k != "command"}
    assert (result["device"], result["precision"], result["layers"], result["reps"]) == ("cpu", "fp32", 1, 2)
    assert set(result["archs"]) == {"transformer_preln", "transformer_preln+fast"} and result["baseline_wps"] > 0
    for row in result["archs"].values():
        low, high = row["spread"]
        assert low <= row["speed_ratio"] <= high and row["met"] == (row["speed_ratio"] >= row["target"])
        assert row["flops_ratio"] > 0 and row["memory_ratio"] is None  # --no-memory
    echoed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in echoed if " rep " in line] == [
        "[throughput] rep 1/2",
        "[throughput] rep 2/2",
    ]


def test_a_failed_benchmark_is_its_last_line(tmp_path):
    (tmp_path / "numbers.json").write_text("{}")  # an earlier run's: not read as this one's
    result = run_benchmark("decoding.py", ["--path", str(tmp_path / "none.pt")], tmp_path / "numbers.json")
    assert result["error"].startswith(f"error: {tmp_path / 'none.pt'}: no such checkpoint")
    assert not (tmp_path / "numbers.json").exists()


def test_decoding_writes_its_numbers_as_json(tiny_data_bin, tmp_path):
    """What scripts/gpu/check.py part f reads: benchmarks/decoding.py --json on a trained model,
    whose data-bin has moved since it was trained (``--data`` names where it is now)."""
    trained_on = tmp_path / "trained-on"
    shutil.copytree(tiny_data_bin, trained_on)
    run_cli(
        "fairseq-train",
        trained_on,
        *("--user-dir", PLUGIN_DIR, "--arch", "transformer_preln", *TINY_MODEL),
        *("--optimizer", "adam", "--lr", "3e-3", "--max-tokens", "1000", "--max-update", "5", "--cpu"),
        *("--save-dir", tmp_path / "ckpt", "--no-epoch-checkpoints", "--no-progress-bar"),
    )
    trained_on.rename(tmp_path / "moved")
    argv = ["--path", str(tmp_path / "ckpt" / "checkpoint_last.pt"), "--data", str(tmp_path / "moved"), "--reps", "2"]
    result = decoding.main(
        [*argv, "--batch-size", "16", "--threads", "1", "--device", "cpu", "--json", str(tmp_path / "d.json")]
    )
    assert json.loads((tmp_path / "d.json").read_text()) == result
    assert result["sentences"] == 40 and 0 <= result["same"] <= 40 and len(result["ratios"]) == 2
    assert min(result["ratios"]) == result["spread"][0] and result["stock_sentences_per_s"] > 0
    seconds = [result["sentences"] / speed for speed in result["sentences_per_s"]["stock"]]
    assert result["sentences"] / statistics.median(seconds) == pytest.approx(result["stock_sentences_per_s"])
    assert [f / s for s, f in zip(*result["sentences_per_s"].values())] == pytest.approx(result["ratios"])
    assert (result["device"], result["precision"], result["beam"]) == ("cpu", "fp32", 5)
    # its output length is fairseq-generate's: the best hypotheses' tokens and </s>, per sentence
    generated = run_cli(
        "fairseq-generate",
        tiny_data_bin,
        *("--user-dir", PLUGIN_DIR, "--path", tmp_path / "ckpt" / "checkpoint_last.pt", "--cpu"),
        *("--beam", "5", "--batch-size", "16", "--gen-subset", "test"),
    )
    lengths = [len(line.split("\t")[2].split()) + 1 for line in generated.splitlines() if line.startswith("H-")]
    assert len(lengths) == 40 and result["tokens_per_sentence"] == pytest.approx(sum(lengths) / 40)


def test_cpu_precision_times_every_arch_in_every_precision(tiny_data_bin, tmp_path):
    """fairseq's transformer in fp32 first (the baseline), then each arch in each precision
    asked for, arch by arch (here fp32 and fp16 with the plugin's fp16_cpu_products off; fp16
    with them on is the same code path in another environment, and trains every method in
    tests/test_mixed_precision.py); a failed run is one line naming it (here after the
    baseline's one fp32 run)."""
    argv = ["--data", str(tiny_data_bin), "--archs", "transformer_preln", "--layers", "1", "--dim", "16"]
    argv += ["--updates", "3", "--log-interval", "1", "--precisions", "fp16, torch's kernels"]
    cpu_precision.main([*argv, "--json", str(tmp_path / "t.json")])
    numbers = json.loads((tmp_path / "t.json").read_text())
    assert [(r["arch"], r["precision"]) for r in numbers["rows"]] == [
        (arch, precision)
        for arch in ("transformer", "transformer_preln")
        for precision in ("fp32", "fp16, torch's kernels")
    ]
    assert all(r["seconds_per_update"] > 0 for r in numbers["rows"])
    assert numbers["native_fp16"] == cpu_fp16.native_fp16_products() and numbers["cpu"]
    with pytest.raises(SystemExit, match=r"^transformer_nope fp32: fairseq-train failed: .*transformer_nope"):
        cpu_precision.main([*argv[:2], "--archs", "transformer_nope", *argv[4:-2], "--precisions", "fp32"])


def test_cpu_precision_reads_the_more_precise_of_fairseqs_two_clocks():
    """fairseq rounds an interval's ups to 0.01 and the wall clock to 1 s: a fast run is timed
    by its rates, a slow one (ups 0.26: up to 2 % off) by the wall-clock span; a rate rounded to
    0 is no division by zero."""
    log = lambda update, wall, ups: {"num_updates": update, "wall": wall, "ups": ups}  # noqa: E731
    fast = [log(5, 3, 2.1), log(10, 5, 2.08), log(15, 8, 2.0), log(20, 10, 2.1)]
    assert cpu_precision.from_logs(fast) == pytest.approx(1 / 2.08)
    slow = [log(5, 20, 0.26), log(10, 39, 0.26), log(15, 58, 0.26), log(20, 77, 0.27)]
    assert cpu_precision.from_logs(slow) == pytest.approx(57 / 15)
    stalled = [log(1, 100, 0.0), log(2, 400, 0.0)]
    assert cpu_precision.from_logs(stalled) == 300
