"""The GPU bundle (scripts/gpu/): collect, offline install, and the check's dry run."""

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import REPO, SHARED_DATA

from fairseq_layernorm_plugins.experiments import gpu_check, render_check
from fairseq_layernorm_plugins.experiments.curves import training_summary

GPU = REPO / "scripts" / "gpu"


def load(name):
    spec = importlib.util.spec_from_file_location(f"gpu_{name}", GPU / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


collect = load("collect")
check = load("check")


def fake_bundle_files(wheels, pins):
    """Empty files named as the wheels / sdist ``pins`` would be downloaded as."""
    wheels.mkdir(parents=True, exist_ok=True)
    for name, version in pins:
        stem = name.replace("-", "_").lower()
        (
            wheels / (f"{stem}-{version}.tar.gz" if name in collect.SDISTS else f"{stem}-{version}-py3-none-any.whl")
        ).write_bytes(b"x" * 1000)


def test_requirements_are_pinned_once_and_bad_lines_name_file_and_line(tmp_path):
    pins = collect.requirements(collect.REQUIREMENTS, collect.SKLEARN)
    names = [collect._canonical(n) for n, _ in pins]
    assert len(names) == len(set(names)) and {
        "fairseq-fixed",
        "hydra-core",
        "omegaconf",
        "bitarray",
        "sacremoses",
        "subword-nmt",
        "scikit-learn",
    } <= set(names)
    bad = tmp_path / "req.txt"
    bad.write_text("# comment\nhydra-core==1.3.2\nbitarray>=3\n")
    with pytest.raises(collect.CollectError, match=rf"{bad}:3: expected 'name==version'"):
        collect.requirements(bad)
    bad.write_text("hydra-core==1.3.2\nhydra_core==1.3.1\n")
    with pytest.raises(collect.CollectError, match=rf"{bad}:2: hydra_core pinned twice"):
        collect.requirements(bad)


def test_collect_keeps_downloaded_files_and_removes_other_versions(tmp_path, monkeypatch):
    def no_network(*args, label):
        raise AssertionError(f"pip called for {label} although every file is there")

    monkeypatch.setattr(collect, "pip", no_network)
    pins = collect.requirements()
    wheels = tmp_path / "wheels"
    fake_bundle_files(wheels, pins)
    (wheels / "hydra_core-1.0.7-py3-none-any.whl").write_bytes(b"old")  # a version no requirement names
    (wheels / "notes.txt").write_text("not a distribution")
    names = collect.collect_wheels(wheels, "3.12", pins=pins)
    assert len(names) == len(pins) and "hydra_core-1.0.7-py3-none-any.whl" not in names
    assert sorted(p.name for p in wheels.iterdir()) == names


def test_collect_packs_the_project_and_refuses_an_oversized_bundle(tmp_path, monkeypatch):
    monkeypatch.setattr(collect, "pip", lambda *a, label: pytest.fail(f"pip called for {label}"))
    out = tmp_path / "bundle"
    fake_bundle_files(out / "wheels", collect.requirements())
    with pytest.raises(SystemExit, match=r"over the 0.001 MiB a node may receive"):
        collect.main(["--out", str(out), "--no-data", "--limit-mib", "0.001"])
    with tarfile.open(out / "project.tar.gz") as tar:
        names = set(tar.getnames())
    assert {
        "fairseq_layernorm_plugins/scripts/gpu/install.sh",
        "fairseq_layernorm_plugins/pyproject.toml",
        "fairseq_layernorm_plugins/fairseq_layernorm_plugins/__init__.py",
        "fairseq_layernorm_plugins/fairseq_layernorm_plugins/runs/launch.py",  # the package's runs/, not the repo's
    } <= names
    top = {n.split("/")[1] for n in names if n.count("/") > 1}
    assert not top & {"runs", ".venv"} and not any("/data/iwslt" in n for n in names)


def test_the_project_pack_leaves_out_runs_saved_part_trained(tmp_path):
    """A saved run's checkpoints (scripts/run_state.py: tens of MB) are carried to a node on
    their own, not in every bundle; the rest of its folder's neighbours are packed."""
    repo = tmp_path / "repo"
    saved = repo / "docs" / "claims" / "x-state" / "claim" / "run"
    saved.mkdir(parents=True)
    for name in ("checkpoint_last.pt", "state.json", "train.log"):
        (saved / name).write_text(name)
    (repo / "docs" / "claims" / "x.md").write_text("table\n")
    (repo / "docs" / "claims" / "state.json").write_text("{}\n")  # no checkpoint beside it: packed
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    collect.pack_project(tmp_path / "project.tar.gz", repo)
    with tarfile.open(tmp_path / "project.tar.gz") as tar:
        names = sorted(tar.getnames())
    assert names == [
        "fairseq_layernorm_plugins/docs/claims/state.json",
        "fairseq_layernorm_plugins/docs/claims/x.md",
    ]


def test_collect_stage_data_names_a_folder_that_is_not_prepared(tmp_path):
    (tmp_path / "bin").mkdir()
    with pytest.raises(collect.CollectError, match=r"not a prepared IWSLT14-mini folder \(missing stamp.json"):
        collect.stage_data(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_install_needs_the_nodes_torch_first(tmp_path):
    """Run by an interpreter without torch, install.sh stops with one line naming what is missing."""
    bare = Path(sys.base_prefix) / "bin" / "python3"
    if subprocess.run([bare, "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip("the base interpreter has torch")
    (tmp_path / "wheels").mkdir()
    proc = subprocess.run(
        ["bash", GPU / "install.sh", tmp_path], capture_output=True, text=True, env={**os.environ, "PYTHON": str(bare)}
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().startswith("install: error:")
        and "lacks: torch" in proc.stderr
        and len(proc.stderr.strip().splitlines()) == 1
    )
    proc = subprocess.run(["bash", GPU / "install.sh", tmp_path / "nowhere"], capture_output=True, text=True)
    assert proc.returncode == 2 and "nowhere/wheels: no such folder" in proc.stderr


def built_against(python=sys.executable):
    """What install.sh records a fairseq wheel built by ``python`` as needing (fairseq's CUDA
    kernels not compiled), asked of that interpreter."""
    versions = "import sys, numpy, torch; print(torch.__version__, *sys.version_info[:2], numpy.__version__)"
    torch_version, major, minor, numpy_version = subprocess.check_output([python, "-c", versions], text=True).split()
    numpy_major = numpy_version.split(".")[0]
    return f"torch {torch_version}, cp{major}{minor}, numpy {numpy_major}, CUDA kernels 0"


def test_install_takes_a_node_built_wheel_only_when_built_against_the_same_stack(tmp_path):
    """install.sh installs fairseq from BUNDLE/built/ when BUILT_AGAINST names this interpreter's
    torch, Python, numpy and CUDA-kernel choice, and compiles the sdist otherwise; a failed build
    leaves the kept wheel as it was and no staging folder. (Unreadable wheel and sdist of a
    version nobody has: pip fails at once, after install.sh has chosen.)"""
    wheels, built = tmp_path / "wheels", tmp_path / "built"
    wheels.mkdir()
    built.mkdir()
    (wheels / "fairseq_fixed-9.9.9.tar.gz").write_bytes(b"not a tarball")
    wheel = built / "fairseq_fixed-9.9.9-py3-none-any.whl"
    wheel.write_bytes(b"not a wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("FAIRSEQ_CUDA_EXTENSIONS", "PIP_CONSTRAINT")}
    env["PYTHON"] = sys.executable

    def install(stamp):
        (built / "BUILT_AGAINST").write_text(stamp + "\n")
        return subprocess.run(["bash", GPU / "install.sh", tmp_path], capture_output=True, text=True, env=env)

    here = built_against()  # this interpreter's stack, asked once
    same = install(here)
    assert same.returncode != 0
    assert f"fairseq-fixed 9.9.9 from {wheel} (built against {here})" in same.stdout
    assert "compiling" not in same.stdout
    for stamp in (here.replace("CUDA kernels 0", "CUDA kernels 1"), here.replace("torch ", "torch 0.")):
        other = install(stamp)
        assert other.returncode != 0
        assert f"compiling fairseq-fixed 9.9.9 against {here}" in other.stdout
        assert "from" not in other.stdout.split("compiling")[0]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["built", "wheels"]  # no staging folder left
        assert wheel.read_bytes() == b"not a wheel" and (built / "BUILT_AGAINST").read_text() == stamp + "\n"
    shutil.rmtree(built)  # the first node: nothing kept yet
    first = subprocess.run(["bash", GPU / "install.sh", tmp_path], capture_output=True, text=True, env=env)
    assert first.returncode != 0 and f"compiling fairseq-fixed 9.9.9 against {here}" in first.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["wheels"]


def test_training_summary_reads_loss_scale_and_speed():
    curves = {
        "train": [
            {"update": u, "loss": loss, "wps": 1000.0 * u, "loss_scale": scale}
            for u, loss, scale in [(10, 9.0, 128.0), (20, 8.0, 64.0), (30, 7.0, 4.0), (40, 6.5, 8.0)]
        ],
        "valid": [{"loss": 6.4}],
        "end": {"update": 40},
    }
    summary = training_summary(curves)
    assert summary["finite"] and summary["falling"] and summary["updates"] == 40
    assert (summary["loss_scale_min"], summary["loss_scale_last"], summary["wps"]) == (
        4.0,
        8.0,
        30000.0,
    )  # median; the first interval left out
    curves["train"][-1]["loss"] = float("nan")
    assert not training_summary(curves)["finite"]
    curves["train"] = [dict(p, loss=9.0 + p["update"], loss_scale=None) for p in curves["train"]]
    summary = training_summary(curves)
    assert not summary["falling"] and summary["loss_scale"] == [] and summary["loss_scale_min"] is None


def test_omega_comparison_flags_a_different_profile():
    def profile(scale):
        return {"encoder": [{"omega": 1.0 * scale}, {"omega": 1.5}], "decoder": [{"omega": 2.0}]}

    records = [
        {"part": "b", "method": "admin", "name": "b.admin", "admin_profile": profile(1.0)},
        {"part": "a", "method": "admin", "precision": "fp16", "admin_profile": profile(1.0 + 1e-6)},
        {"part": "a", "method": "admin", "precision": "bf16", "admin_profile": profile(1.01)},
        {"part": "a", "method": "postln", "precision": "fp16"},
    ]
    rows = render_check.omega_rows(records, check.OMEGA_TOLERANCE)
    assert [(r["precision"], r["equal"], r["compared"]) for r in rows] == [("fp16", True, 3), ("bf16", False, 3)]
    assert rows[1]["max_rel_diff"] == pytest.approx(0.01)


def test_carried_keeps_finished_results_of_the_same_budget_with_the_machine_that_measured_them():
    old, new = {"date": "2026-11-26", "device": "H200"}, {"date": "2026-12-01", "device": "H100"}
    budget = check.replace(gpu_check.GPU, deep_updates=50)
    earlier = {
        "facts": new,
        "budget": json.loads(json.dumps(dataclasses.asdict(budget))),
        "runs": [
            {"name": "a.preln.6L.fp16", "part": "a", "method": "preln", "precision": "fp16", "carried": old},
            {"name": "a.preln.6L.bf16", "part": "a", "method": "preln", "precision": "bf16"},
            {"name": "a.admin.6L.fp16", "part": "a", "method": "admin", "precision": "fp16"},
            {"name": "a.dyt.6L.fp16", "part": "a", "method": "dyt", "precision": "fp16", "error": "NaN"},
            {"name": "a.dyt.6L.bf16", "part": "a", "method": "dyt", "precision": "bf16", "not_run": "deadline"},
            {"name": "d.admin.18L.fp16", "part": "d", "method": "admin", "precision": "fp16"},
        ],
        "throughput": [
            {"precision": "fp16", "archs": {"transformer_preln": {}, "transformer_preln+fast": {}}},
            {"precision": "bf16", "error": "killed"},
        ],
        "decoding": [{"precision": "fp16"}, {"precision": "bf16", "not_run": "deadline"}],
    }
    runs, benches = gpu_check.carried(earlier, budget, ["transformer_preln"])
    assert {name: r["carried"] for name, r in runs.items()} == {
        "a.preln.6L.fp16": old,  # measured two checks ago: its machine, not the one that carried it
        "a.admin.6L.fp16": new,
        "d.admin.18L.fp16": new,
    }  # not a.preln.6L.bf16: part f has yet to decode with its checkpoint, which stayed on that machine
    assert sorted(benches) == [("c", "fp16"), ("f", "fp16")] and benches["c", "fp16"]["carried"] == new
    assert "a.preln.6L.bf16" in gpu_check.carried(earlier, budget, ["transformer_preln"], parts="abcde")[0]
    # throughput that did not time every arch asked for now, or another budget: measured again
    assert ("c", "fp16") not in gpu_check.carried(earlier, budget, ["transformer_preln", "transformer_dyt"])[1]
    # ... unless this check does not measure throughput at all: then it is kept as it was
    assert ("c", "fp16") in gpu_check.carried(earlier, budget, ["transformer_preln", "transformer_dyt"], parts="af")[1]
    assert gpu_check.carried(earlier, gpu_check.GPU) == gpu_check.carried(None, budget) == ({}, {})


def test_carried_from_names_each_machine_once_in_the_order_measured():
    h200 = {"date": "2026-11-26", "device": "H200", "torch": "2.11"}
    h100 = {"date": "2026-11-27", "device": "H100", "torch": "2.11"}
    # the H100 checked over two calls, the second carrying the first's results
    earlier = {"facts": dict(h100), "carried_from": [h200, dict(h100)]}
    assert gpu_check.carried_from(earlier) == [h200, h100]
    assert gpu_check.carried_from({"facts": h200}) == [h200]
    report = {"facts": h200 | {"cuda": "13.0", "python": "3.12"}, "minutes": 1.0, "command": "c"}
    report |= {"budget": {"generate": []}, "runs": [], "carried_from": gpu_check.carried_from(earlier)}
    markdown = render_check.check_report(report, 1e-6)
    assert markdown.count("H100 (torch") == 1 and markdown.count("Carried (not measured again)") == 2


def test_plan_trains_the_runs_parts_b_and_f_need_whatever_the_methods():
    names = lambda parts, methods: [r.name for r in gpu_check.plan(parts, gpu_check.GPU, methods)]
    assert names("af", ["admin"]) == [f"a.{m}.6L.{p}" for m in ("preln", "admin") for p in ("fp16", "bf16")]
    assert names("b", ["dyt"]) == ["a.admin.6L.fp16", "a.admin.6L.bf16", "b.admin.6L.fp32"]
    assert names("a", ["dyt", "postln"]) == [f"a.{m}.6L.{p}" for m in ("postln", "dyt") for p in ("fp16", "bf16")]
    assert [r.name for r in gpu_check.plan("d", gpu_check.GPU, [])] == [f"d.{m}.18L.fp16" for m in gpu_check.DEEP]


def test_deep_methods_default_to_all_four_in_their_order():
    """Part d's methods (--deep-methods): Post-LN, Admin, B2T and Pre-LN by default, a named subset
    in that order, and an unknown or empty list refused."""
    assert gpu_check.chosen_deep(None) == list(gpu_check.DEEP) == ["postln", "admin", "b2t", "preln"]
    assert gpu_check.chosen_deep("preln, postln") == ["postln", "preln"]
    deep = gpu_check.plan("ad", gpu_check.DRY, ["dyt"], gpu_check.chosen_deep("admin"))
    assert [r.name for r in deep] == ["d.admin.3L.fp16", "a.dyt.2L.fp16"]
    for wrong in ("admin,deepnet", ""):
        with pytest.raises(ValueError, match="unknown method"):
            gpu_check.chosen_deep(wrong)


@pytest.fixture(scope="module")
def check_data(tmp_path_factory):
    """IWSLT14-mini cut to what a dry run reads: 1,000 training pairs (its runs' 8 updates read
    about 250), every 64th validation pair (114, validated at the end of each run) and 16 test
    lines; the vocabulary (about 4,000 types a side), whose output layer is most of a d=32
    model's work, is the one those training pairs make."""
    if not (SHARED_DATA / "iwslt14").is_dir():
        pytest.skip("../shared/data/iwslt14 not present")
    from fairseq_layernorm_plugins.prepare.iwslt14_mini import prepare

    data = tmp_path_factory.mktemp("gpucheck") / "iwslt14-mini"
    prepare(SHARED_DATA / "iwslt14", data, test_lines=16, train_pairs=1000, valid_every=64)
    return data


def test_check_methods_default_to_every_recipe_and_the_papers_six_on_a_dry_run():
    """Part a's methods: every IWSLT14-mini recipe (B2T w/o LN beside B2T) by default, the papers'
    six on a dry run, a named subset in table order, and an unknown name refused."""
    from fairseq_layernorm_plugins.methods import PAPER_METHODS, method_names

    every = method_names("iwslt14_mini")
    assert gpu_check.chosen_methods(None, False) == gpu_check.chosen_methods("all", True)
    assert [m for m in gpu_check.chosen_methods(None, False) if m != "b2t_noln"] == every
    assert len(every) > len(PAPER_METHODS)  # the newer methods run on the GPU, not in the dry run
    assert gpu_check.chosen_methods(None, True) == [*PAPER_METHODS[:5], "b2t_noln", PAPER_METHODS[5]]
    assert gpu_check.chosen_methods("deepnet,postln", False) == ["postln", "deepnet"]
    with pytest.raises(ValueError, match="unknown method"):
        gpu_check.chosen_methods("postln,sandwich", False)


def test_check_leaves_what_it_measured_when_stopped_mid_way(check_data, tmp_path, monkeypatch):
    """OUT/check.json and check.md are rewritten after each finished run: a machine taken back
    after the first of two runs leaves that run's record."""
    log = [{"update": u, "loss": 11.0 - u / 4, "loss_scale": 128.0, "wps": 900.0} for u in range(1, 9)]
    measured = {"train": log, "valid": [{"loss": 9.0}], "end": {"update": 8}}
    runs = tmp_path / "runs"
    for method in ("preln", "admin"):  # finished earlier: read, not trained
        run = gpu_check.Run("a", method, "fp16", 2, 8)
        record = {
            **training_summary(measured),
            **dataclasses.asdict(run),
            "name": run.name,
            "label": gpu_check.METHODS[method][2],
        }
        (runs / run.name).mkdir(parents=True)
        (runs / run.name / "check.json").write_text(json.dumps(record))

    def taken_back(work, items, jobs):
        yield items[0], work(items[0])
        raise KeyboardInterrupt("machine taken back")

    monkeypatch.setattr(check.experiment, "parallel", taken_back)
    argv = ["--out", tmp_path / "out", "--runs", runs, "--data", check_data, "--dry-run", "--parts", "a"]
    with pytest.raises(KeyboardInterrupt):
        check.main(list(map(str, argv + ["--methods", "preln,admin"])))
    report = json.loads((tmp_path / "out" / "check.json").read_text())
    assert [r["name"] for r in report["runs"]] == ["a.preln.2L.fp16"]
    assert "| Pre-LN | fp16 |" in (tmp_path / "out" / "check.md").read_text()


def test_check_keeps_carried_results_beyond_its_parts_and_methods(check_data, tmp_path):
    """A check of part a for one method, carrying an earlier check's report, keeps that report's
    other runs and its benchmarks in its own check.json and check.md, in the plan's order."""
    log = [{"update": u, "loss": 11.0 - u / 4, "loss_scale": 128.0, "wps": 900.0} for u in range(1, 9)]
    summary = training_summary({"train": log, "valid": [{"loss": 9.0}], "end": {"update": 8}})
    record = lambda part, method, layers: {
        **summary,
        **dataclasses.asdict(gpu_check.Run(part, method, "fp16", layers, 8)),
        "name": gpu_check.Run(part, method, "fp16", layers, 8).name,
        "label": gpu_check.METHODS[method][2],
    }
    runs = tmp_path / "runs"
    (runs / "a.dyt.2L.fp16").mkdir(parents=True)  # this check's one run, finished on this machine: read
    (runs / "a.dyt.2L.fp16" / "check.json").write_text(json.dumps(record("a", "dyt", 2)))
    old = {"date": "2026-11-26", "device": "H200", "torch": "2.11", "cuda": "13.0", "python": "3.12"}
    row = {"speed_ratio": 1.25, "spread": [1.0, 1.5], "memory_ratio": 1.0, "same": 3, "sentences": 4}
    row |= {"tokens_per_sentence": 12.25}
    earlier = {
        "facts": old,
        "budget": json.loads(json.dumps(dataclasses.asdict(gpu_check.DRY))),
        "runs": [record("a", "mixln", 2), record("d", "admin", 3), record("a", "preln", 2), record("a", "admin", 2)],
        "throughput": [
            {"precision": "fp16", "device": "cuda", "command": "throughput.py", "archs": {"transformer_preln": row}}
        ],
        "decoding": [
            {"precision": "fp16", "device": "cuda", "command": "decoding.py", "stock_sentences_per_s": 9.0, **row}
        ],
    }
    profile = {"encoder": [{"omega": 1.5}, {"omega": 1.75}], "decoder": [{"omega": 2.0}]}
    earlier["runs"][-1]["admin_profile"] = profile  # part b: Admin's fp16 omegas against the fp32 run's
    earlier["runs"].append({**record("b", "admin", 2), "precision": "fp32", "name": "b.admin.2L.fp32"})
    earlier["runs"][-1]["admin_profile"] = {**profile, "decoder": [{"omega": 2.5}]}
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    argv = ["--out", tmp_path / "out", "--runs", runs, "--data", check_data, "--dry-run", "--parts", "a"]
    argv += ["--methods", "dyt", "--carry", tmp_path / "earlier.json"]
    assert check.main(list(map(str, argv))) == 0
    report = json.loads((tmp_path / "out" / "check.json").read_text())
    names = ["d.admin.3L.fp16", "a.preln.2L.fp16", "a.admin.2L.fp16", "a.mixln.2L.fp16", "a.dyt.2L.fp16"]
    assert [r["name"] for r in report["runs"]] == names + ["b.admin.2L.fp32"]  # part, then METHODS order
    assert [r.get("carried") for r in report["runs"]] == [old, old, old, old, None, old]
    [omegas] = report["omegas"]  # compared again from the carried profiles: 2.0 against 2.5
    assert (omegas["compared"], omegas["max_rel_diff"], omegas["equal"]) == (3, 0.2, False)
    assert [b["carried"] for b in report["throughput"] + report["decoding"]] == [old, old]
    markdown = (tmp_path / "out" / "check.md").read_text()
    assert "| Mix-LN (carried) | fp16 |" in markdown and "| DyT | fp16 |" in markdown
    assert "| transformer_preln | 1.250 | 1.000-1.500 |" in markdown and "9.0 sentences/s" in markdown
    assert "the same translation for 3 of 4 sentences, 12.2 tokens each." in markdown


def check_in_process(argv, capsys):
    """scripts/gpu/check.py's main with ``argv``, in this process: (its exit status, what it wrote
    to stderr)."""
    capsys.readouterr()
    code = check.main(list(map(str, argv)))
    return code, capsys.readouterr().err


@pytest.mark.slow(2)
def test_check_dry_run_trains_scores_and_resumes(check_data, tmp_path, capsys, monkeypatch):
    """check.py --dry-run as a command: every part on CPU in fp16, part a for Pre-LN and Admin
    (the two parts b and f need; the default method list is
    test_check_methods_default_to_every_recipe_...), part d for Admin (one of its four: they
    differ in their recipe alone, and every method trains in fp16 in tests/test_mixed_precision.py;
    the four: test_deep_methods_default_to_all_four_in_their_order). Then its main in this
    process (these calls train nothing): a second call of part b reuses the runs; a call
    elsewhere with --carry measures nothing again, and one past its --deadline runs nothing."""
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))  # check.main sets it if unset
    out, runs = tmp_path / "out", tmp_path / "runs"
    argv = ["--out", out, "--runs", runs, "--data", check_data, "--dry-run", "--jobs", "1", "--methods", "preln,admin"]
    argv += ["--deep-methods", "admin"]
    cmd = [sys.executable, GPU / "check.py", *argv]
    proc = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "check.json").read_text())
    trained = {r["name"]: r for r in report["runs"]}
    names = ["d.admin.3L.fp16", "a.preln.2L.fp16", "a.admin.2L.fp16", "b.admin.2L.fp32"]
    assert [r["name"] for r in report["runs"]] == names  # the plan's order
    for r in trained.values():
        assert "error" not in r and r["finite"] and r["updates"] == (1 if r["part"] == "b" else 8)
        if r["part"] != "b":
            assert set(r["bleu"]) == {"sacrebleu", "tokenized", "compound_split"} and r["sentences"] == 16
    assert [(row["precision"], row["compared"], row["equal"]) for row in report["omegas"]] == [("fp16", 10, True)]
    assert all(r["loss_scale"] for r in trained.values() if r["part"] != "b")  # fairseq's fp16 path, on the CPU
    bench = report["throughput"][0]
    methods = {"transformer_preln", "transformer_admin"}
    assert "error" not in bench and set(bench["archs"]) == methods | {m + "+fast" for m in methods}
    markdown = (out / "check.md").read_text()
    decoding = report["decoding"][0]  # part a's Pre-LN model, beam search with and without --fused-attention
    # in fp16 the fused and fairseq's attention round apart: a near-tie in the beam may flip
    # (the same translations in fp32: tests/test_fused_attention.py)
    assert "error" not in decoding and decoding["sentences"] == 16 and decoding["same"] >= 14, decoding
    # the dry budget's length limit reached decoding.py: in one batch of 16, at most 1.2 x the longest
    # source (</s> included) + 5 tokens, then </s>; fairseq's own limit, 200, is past it
    longest = max(len(line.split()) + 1 for line in (check_data / "test.de").read_text().splitlines())
    assert decoding["tokens_per_sentence"] <= 1.2 * longest + 6 < 200, decoding
    for heading in ("### a. Every method", "### b. Admin's omegas", "### c. Throughput", "### d. 3L-3L", "### f. Beam"):
        assert heading in markdown
    assert (out / "check.png").stat().st_size > 10_000
    full = tmp_path / "full.json"
    full.write_text((out / "check.json").read_text())
    log = runs / "a.admin.2L.fp16" / "train.log"
    before = log.stat().st_mtime_ns
    code, stderr = check_in_process([*argv, "--parts", "b"], capsys)
    assert code == 0, stderr[-3000:]
    assert log.stat().st_mtime_ns == before  # not trained again
    report = json.loads((out / "check.json").read_text())
    assert (
        {r["name"] for r in report["runs"]} == {"a.admin.2L.fp16", "b.admin.2L.fp32"}
        and "throughput" not in report
        and "decoding" not in report
    )
    # the same machine, carrying the first call's results: its own runs are read, not the carried
    # ones; part d's runs and parts c and f, which it does not measure, stay in its report as carried
    code, stderr = check_in_process([*argv, "--carry", full, "--parts", "ab"], capsys)
    assert code == 0, stderr[-3000:]
    report = json.loads((out / "check.json").read_text())
    assert [r["name"] for r in report["runs"]] == [r["name"] for r in json.loads(full.read_text())["runs"]]
    assert all(("carried" in r) == (r["part"] == "d") for r in report["runs"])
    assert all("carried" in b for b in report["throughput"] + report["decoding"])
    # another machine (no runs of its own), past its deadline at once: what the first call
    # measured is carried as it was, so nothing is left to run
    other = [*argv[:3], tmp_path / "other", *argv[4:], "--carry", full, "--deadline", "0"]
    code, stderr = check_in_process(other, capsys)
    assert code == 0 and "not run" not in stderr, stderr[-3000:]
    carried = json.loads((out / "check.json").read_text())
    first = json.loads(full.read_text())
    assert carried["carried_from"] == [first["facts"]] and not (tmp_path / "other").exists()
    assert [{k: v for k, v in r.items() if k != "carried"} for r in carried["runs"]] == first["runs"]
    assert all(r["carried"] == first["facts"] for r in carried["runs"] + carried["throughput"] + carried["decoding"])
    assert "| Admin (carried) | fp16 |" in (out / "check.md").read_text()
    # a third machine, past its deadline without anything carried: every run and benchmark "not run"
    code, stderr = check_in_process(other[:-4] + ["--deadline", "0"], capsys)
    assert code == 0 and "run again with --carry" in stderr, stderr[-3000:]
    report = json.loads((out / "check.json").read_text())
    assert all(r["not_run"] == "deadline" for r in report["runs"]) and len(report["runs"]) == len(first["runs"])
    assert all("not_run" in b for b in report["throughput"] + report["decoding"])
    assert "not run (deadline)" in (out / "check.md").read_text()
