"""Carrying a run that is still training to another machine (recipes/run_state.py,
scripts/run_state.py): what is saved, and that the run restored from it trains on exactly as
the run that never moved."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import REPO
from helpers.in_process import fairseq_train

from fairseq_layernorm_plugins.recipes import run_state

# dropout on, so the restored run must also draw the same masks; validated and saved every 4
# updates; the first validation "best" (the loss maximised), so the best checkpoint is an old one
FLAGS = ["--dropout", "0.1", "--validate-interval-updates", "4", "--save-interval-updates", "4"]
FLAGS += ["--keep-interval-updates", "3", "--maximize-best-checkpoint-metric"]
CARRIED_AT, END = 10, 16


def train(data_bin, run_dir, updates):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "spec.json").write_text('{"budget": {"updates": 16}}\n')
    with open(run_dir / "train.log", "a") as log:
        log.write(f"trained to {updates}\n")
    return fairseq_train(data_bin, run_dir / "checkpoints", "transformer_preln", *FLAGS, updates=updates)


def load(path):
    return torch.load(path, map_location="cpu", weights_only=False)


def assert_same_model(path, reference):
    model, expected = load(path)["model"], load(reference)["model"]
    assert model.keys() == expected.keys()
    for key, value in expected.items():
        torch.testing.assert_close(model[key], value, rtol=0, atol=0, msg=key)


@pytest.fixture(scope="module")
def runs(tiny_data_bin, tmp_path_factory):
    """An uninterrupted run to update 16, and the same run stopped at update 10 under root/."""
    base = tmp_path_factory.mktemp("runs")
    train(tiny_data_bin, base / "whole", END)
    train(tiny_data_bin, base / "root" / "claim" / "run", CARRIED_AT)
    return base


def test_a_restored_run_trains_on_exactly_as_the_run_that_never_moved(tiny_data_bin, runs, tmp_path):
    run = runs / "root" / "claim" / "run"
    before = {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()}
    (saved,) = run_state.save([run], runs / "root", tmp_path / "state", numbered=True).values()
    assert saved["update"] == CARRIED_AT and saved["best_update"] == 4
    assert saved["numbered"] == {"4": "checkpoint_1_4.pt", "8": "checkpoint_1_8.pt"}

    carried = tmp_path / "state" / "claim" / "run"
    # the last checkpoint whole; the best and the numbered ones without the optimizer's moments
    assert (carried / "checkpoint_last.pt").read_bytes() == before["checkpoint_last.pt"]
    for name in ("checkpoint_best.pt", "checkpoint_1_4.pt", "checkpoint_1_8.pt"):
        assert "last_optimizer_state" not in load(carried / name)
        assert (carried / name).stat().st_size < 0.6 * len(before[name])

    restored = run_state.restore(tmp_path / "state", tmp_path / "machine2")
    assert restored == {"claim/run": json.loads((carried / "state.json").read_text())}
    moved = tmp_path / "machine2" / "claim" / "run"
    assert (moved / "spec.json").read_bytes() == (run / "spec.json").read_bytes()
    assert (moved / "train.log").read_text() == "trained to 10\n"
    assert sorted(p.name for p in (moved / "checkpoints").iterdir()) == sorted(before)
    for name in before:
        assert_same_model(moved / "checkpoints" / name, run / "checkpoints" / name)

    train(tiny_data_bin, moved, END)
    whole = runs / "whole" / "checkpoints"
    assert load(moved / "checkpoints" / "checkpoint_last.pt")["optimizer_history"][-1]["num_updates"] == END
    assert_same_model(moved / "checkpoints" / "checkpoint_last.pt", whole / "checkpoint_last.pt")
    assert_same_model(moved / "checkpoints" / "checkpoint_best.pt", whole / "checkpoint_best.pt")
    assert_same_model(moved / "checkpoints" / "checkpoint_1_8.pt", whole / "checkpoint_1_8.pt")


def test_restoring_on_the_machine_that_kept_the_run_changes_nothing(runs, tmp_path):
    run = runs / "root" / "claim" / "run"
    run_state.save([run], runs / "root", tmp_path / "state")
    stamps = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    assert run_state.restore(tmp_path / "state", runs / "root") == {"claim/run": None}
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == stamps


def test_a_best_checkpoint_that_is_the_last_is_carried_once(runs, tmp_path):
    run = tmp_path / "root" / "run"
    shutil.copytree(runs / "root" / "claim" / "run", run)
    checkpoints = run / "checkpoints"
    shutil.copy(checkpoints / "checkpoint_last.pt", checkpoints / "checkpoint_best.pt")
    saved = run_state.save([run], tmp_path / "root", tmp_path / "state")["run"]
    assert saved == {**saved, "update": CARRIED_AT, "best_update": CARRIED_AT, "numbered": {}}
    assert sorted(p.name for p in (tmp_path / "state" / "run").iterdir()) == [
        "checkpoint_last.pt",
        "spec.json",
        "state.json",
        "train.log",
    ]
    run_state.restore(tmp_path / "state", tmp_path / "machine2")
    moved = tmp_path / "machine2" / "run" / "checkpoints"
    assert sorted(p.name for p in moved.iterdir()) == ["checkpoint_best.pt", "checkpoint_last.pt"]
    assert (moved / "checkpoint_best.pt").read_bytes() == (checkpoints / "checkpoint_last.pt").read_bytes()


def test_a_checkpoint_still_being_written_is_copied_again(runs, tmp_path, monkeypatch):
    """fairseq copies a new checkpoint to its other names with a plain copy: a save that meets
    one half-written waits and copies it again."""
    good = (runs / "root" / "claim" / "run" / "checkpoints" / "checkpoint_last.pt").read_bytes()
    path = tmp_path / "checkpoint_last.pt"
    path.write_bytes(good[: len(good) // 2])
    waits = []
    monkeypatch.setattr(run_state.time, "sleep", lambda s: (waits.append(s), path.write_bytes(good)))
    state = run_state._load(path, copy_to=tmp_path / "copy.pt")
    assert len(waits) == 1 and run_state.checkpoint_update(state) == CARRIED_AT
    assert (tmp_path / "copy.pt").read_bytes() == good
    path.write_bytes(good[:100])
    monkeypatch.setattr(run_state.time, "sleep", lambda s: None)
    with pytest.raises(ValueError, match="checkpoint_last.pt: not a readable checkpoint"):
        run_state._load(path)


def test_bad_input_is_one_line_naming_the_folder(runs, tmp_path):
    (tmp_path / "root" / "empty").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"empty: no checkpoints/checkpoint_last.pt to carry"):
        run_state.save([tmp_path / "root" / "empty"], tmp_path / "root", tmp_path / "state")
    assert not (tmp_path / "state").exists()  # nothing half-written
    with pytest.raises(ValueError, match=r"run: not a run under .*elsewhere"):
        run_state.save([runs / "root" / "claim" / "run"], tmp_path / "elsewhere", tmp_path / "state")

    script = [sys.executable, str(REPO / "scripts" / "run_state.py")]
    proc = subprocess.run([*script, "restore", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [f"run_state.py: {tmp_path}: no saved run (no state.json under it)"]
