"""Carrying a run that is still training to another machine (runs/run_state.py,
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

from fairseq_layernorm_plugins.runs import run_state

# dropout on, so the restored run must also draw the same masks; validated and saved every 4
# updates; the first validation "best" (the loss maximised), so the best checkpoint is an old one
FLAGS = ["--dropout", "0.1", "--validate-interval-updates", "4", "--save-interval-updates", "4"]
FLAGS += ["--keep-interval-updates", "3", "--maximize-best-checkpoint-metric"]
CARRIED_AT, END = 12, 16  # the carry at an update checkpoint: checkpoint_1_12.pt is the last one


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
    """An uninterrupted run to update 16, and the same run stopped at update 12 under root/."""
    base = tmp_path_factory.mktemp("runs")
    train(tiny_data_bin, base / "whole", END)
    train(tiny_data_bin, base / "root" / "claim" / "run", CARRIED_AT)
    return base


def test_a_restored_run_trains_on_exactly_as_the_run_that_never_moved(tiny_data_bin, runs, tmp_path):
    run = runs / "root" / "claim" / "run"
    before = {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()}
    (saved,) = run_state.save([run], runs / "root", tmp_path / "state", numbered=True).values()
    assert saved["update"] == CARRIED_AT and saved["best_update"] == 4 and saved["path"] == "claim/run"
    assert saved["numbered"] == {"4": "checkpoint_1_4.pt", "8": "checkpoint_1_8.pt", "12": "checkpoint_1_12.pt"}

    carried = tmp_path / "state" / "claim" / "run"
    # the last checkpoint whole; the best and the numbered ones without the optimizer's moments
    assert (carried / "checkpoint_last.pt").read_bytes() == before["checkpoint_last.pt"]
    for name in ("checkpoint_best.pt", "checkpoint_1_4.pt", "checkpoint_1_8.pt"):
        assert "last_optimizer_state" not in load(carried / name)
        assert (carried / name).stat().st_size < 0.6 * len(before[name])
    assert not (carried / "checkpoint_1_12.pt").exists()  # the last one's model

    restored = run_state.restore(tmp_path / "state", tmp_path / "machine2")
    assert restored == {"claim/run": json.loads((carried / "state.json").read_text())}
    moved = tmp_path / "machine2" / "claim" / "run"
    assert (moved / "spec.json").read_bytes() == (run / "spec.json").read_bytes()
    assert (moved / "train.log").read_text() == "trained to 12\n"
    assert sorted(p.name for p in (moved / "checkpoints").iterdir()) == sorted(before)
    for name in before:
        assert_same_model(moved / "checkpoints" / name, run / "checkpoints" / name)

    resumed = train(tiny_data_bin, moved, END)
    assert [int(r["num_updates"]) for r in resumed.of("train_inner")] == list(range(CARRIED_AT + 1, END + 1))
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


def test_a_run_that_trained_less_is_replaced_from_any_folder_of_the_saved_one(runs, tmp_path):
    """Restored from the saved run's own folder, the run goes back to its path under the root,
    not to the root itself; a run there that trained less is replaced whole."""
    run = runs / "root" / "claim" / "run"
    run_state.save([run], runs / "root", tmp_path / "state")
    other = tmp_path / "machine2" / "claim" / "other"
    other.mkdir(parents=True)
    stale = tmp_path / "machine2" / "claim" / "run"
    (stale / "checkpoints").mkdir(parents=True)
    shutil.copy(run / "checkpoints" / "checkpoint_1_8.pt", stale / "checkpoints" / "checkpoint_last.pt")
    (stale / "stale.txt").write_text("from the shorter run\n")
    restored = run_state.restore(tmp_path / "state" / "claim" / "run", tmp_path / "machine2")
    assert list(restored) == ["claim/run"] and restored["claim/run"]["update"] == CARRIED_AT
    assert not (stale / "stale.txt").exists() and other.is_dir()
    assert (stale / "checkpoints" / "checkpoint_last.pt").read_bytes() == (
        run / "checkpoints" / "checkpoint_last.pt"
    ).read_bytes()
    assert sorted(p.name for p in (tmp_path / "machine2").iterdir()) == ["claim"]  # nothing left aside


def test_a_best_checkpoint_that_is_the_last_is_carried_once(runs, tmp_path):
    run = tmp_path / "root" / "run"
    shutil.copytree(runs / "root" / "claim" / "run", run)
    checkpoints = run / "checkpoints"
    shutil.copy(checkpoints / "checkpoint_last.pt", checkpoints / "checkpoint_best.pt")
    saved = run_state.save([run], tmp_path / "root", tmp_path / "state")["run"]
    assert saved == {**saved, "update": CARRIED_AT, "best_update": CARRIED_AT, "numbered": {"12": "checkpoint_1_12.pt"}}
    assert sorted(p.name for p in (tmp_path / "state" / "run").iterdir()) == [
        "checkpoint_last.pt",
        "spec.json",
        "state.json",
        "train.log",
    ]
    run_state.restore(tmp_path / "state", tmp_path / "machine2")
    moved = tmp_path / "machine2" / "run" / "checkpoints"
    assert sorted(p.name for p in moved.iterdir()) == ["checkpoint_1_12.pt", "checkpoint_best.pt", "checkpoint_last.pt"]
    for name in ("checkpoint_best.pt", "checkpoint_1_12.pt"):
        assert (moved / name).read_bytes() == (checkpoints / "checkpoint_last.pt").read_bytes()


@pytest.mark.parametrize("killed", [False, True])
def test_a_best_checkpoint_newer_than_the_last_waits_for_fairseq(runs, tmp_path, monkeypatch, killed):
    """fairseq copies a new best checkpoint to checkpoint_last.pt after checkpoint_best.pt: a
    save between the two copies waits for the second; where it never comes (the run was
    killed in between), the best one is carried as it is, newer than the last."""
    run = tmp_path / "root" / "run"
    shutil.copytree(runs / "root" / "claim" / "run", run)
    newer = runs / "whole" / "checkpoints" / "checkpoint_last.pt"  # update 16
    shutil.copy(newer, run / "checkpoints" / "checkpoint_best.pt")
    waits = []

    def wait(seconds):
        waits.append(seconds)
        if not killed:
            shutil.copy(newer, run / "checkpoints" / "checkpoint_last.pt")

    monkeypatch.setattr(run_state.time, "sleep", wait)
    saved = run_state.save([run], tmp_path / "root", tmp_path / "state")["run"]
    assert (saved["update"], saved["best_update"]) == ((CARRIED_AT, END) if killed else (END, END))
    assert len(waits) == (run_state.ATTEMPTS if killed else 1)
    assert (tmp_path / "state" / "run" / "checkpoint_best.pt").exists() == killed


def test_a_checkpoint_that_changes_while_it_is_copied_is_copied_again(runs, tmp_path, monkeypatch):
    """fairseq copies a new checkpoint to its other names in place: a copy made while the
    file changed, or one that does not load, is made again."""
    good = (runs / "root" / "claim" / "run" / "checkpoints" / "checkpoint_last.pt").read_bytes()
    path = tmp_path / "checkpoint_last.pt"
    path.write_bytes(good[: len(good) // 2])
    waits = []
    monkeypatch.setattr(run_state.time, "sleep", lambda s: (waits.append(s), path.write_bytes(good)))
    state = run_state._copy_checkpoint(path, tmp_path / "copy.pt")
    assert len(waits) == 1 and run_state.updates_of(state) == CARRIED_AT
    assert (tmp_path / "copy.pt").read_bytes() == good

    copies, copy = [], shutil.copy2

    def copy_while_fairseq_writes(source, target):
        copy(source, target)
        copies.append(target)
        if len(copies) == 1:  # the source rewritten after this copy read it
            path.write_bytes(good)

    monkeypatch.setattr(run_state.shutil, "copy2", copy_while_fairseq_writes)
    run_state._copy_checkpoint(path, tmp_path / "copy.pt")
    assert len(copies) == 2

    monkeypatch.setattr(run_state.shutil, "copy2", copy)
    path.write_bytes(good[:100])
    monkeypatch.setattr(run_state.time, "sleep", lambda s: None)
    with pytest.raises(ValueError, match="checkpoint_last.pt: not a readable checkpoint"):
        run_state._copy_checkpoint(path, tmp_path / "copy.pt")


def test_bad_input_is_one_line_naming_the_folder(runs, tmp_path):
    root = tmp_path / "root"
    (root / "empty").mkdir(parents=True)
    shutil.copytree(runs / "root" / "claim" / "run", root / "run")
    with pytest.raises(ValueError, match=r"1 of 2 not saved; .*empty: no checkpoints/checkpoint_last.pt to carry"):
        run_state.save([root / "empty", root / "run"], root, tmp_path / "state")
    assert run_state.saved_runs(tmp_path / "state") == [tmp_path / "state" / "run"]  # the other one saved
    with pytest.raises(ValueError, match=r"run: not a run under .*elsewhere"):
        run_state.save([root / "run"], tmp_path / "elsewhere", tmp_path / "state")
    with pytest.raises(ValueError, match=r"root: not a run under"):
        run_state.save([root], root, tmp_path / "state")
    (tmp_path / "state" / ".run.tmp-x").mkdir()  # a save killed mid-way leaves a hidden folder
    (tmp_path / "state" / ".run.tmp-x" / "state.json").write_text("{")
    assert run_state.saved_runs(tmp_path / "state") == [tmp_path / "state" / "run"]
    (tmp_path / "state" / "run" / "state.json").write_text("{")
    with pytest.raises(ValueError, match=r"run/state.json: not a saved run's record"):
        run_state.restore(tmp_path / "state", tmp_path / "machine2")

    script = [sys.executable, str(REPO / "scripts" / "run_state.py")]
    proc = subprocess.run([*script, "restore", str(root / "empty")], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"run_state.py: {root / 'empty'}: no saved run (no state.json under it)"
    ]
