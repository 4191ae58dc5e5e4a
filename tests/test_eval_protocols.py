"""The authors' evaluation protocols (recipes' ``generate:``): checkpoint windows with an
upper bound (Transformer-Clinic), best-window search on the test set (T-Fixup's
InferenceIWSLT.py), per-epoch single-checkpoint curves (Pre-LN Fig. 4). Translation is
replaced by a score read off each (averaged) checkpoint, so each test takes well under a second."""

import json

import pytest
import torch

from fairseq_layernorm_plugins.recipes.config import load_recipe
from fairseq_layernorm_plugins.runs import evaluate as ev


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A run directory with epoch checkpoints 1..E whose one weight is E; scoring a
    checkpoint gives ``bleu(weight)`` and records which subset was scored."""
    save = tmp_path / "checkpoints"
    save.mkdir()
    calls = []

    def make(epochs, generate, bleu):
        for epoch in epochs:
            torch.save({"model": {"w": torch.tensor([float(epoch)])}}, save / f"checkpoint{epoch}.pt")
        record = {
            "recipe": "r",
            "save_dir": str(save),
            "data": str(tmp_path),
            "target_lang": "en",
            "generate": generate,
        }
        (tmp_path / "run.json").write_text(json.dumps(record))

        def fake_score(run, run_dir, data_bin, root, checkpoint, subset, *rest):
            w = torch.load(checkpoint, weights_only=False)["model"]["w"].item()
            calls.append((subset, w))
            return {"tokenized": {"score": bleu(w), "label": "tokenized BLEU"}}, 7

        monkeypatch.setattr(ev, "score_subset", fake_score)
        return tmp_path, calls

    return make


def test_window_up_to_the_upper_bound(run):
    """eval_iwslt_de-en.sh: average_checkpoints.py --num-epoch-checkpoints 10 --checkpoint-upper-bound 90."""
    run_dir, calls = run(range(1, 96), {"average_last": 10, "checkpoint_upper_bound": 90, "bleu": "tokenized"}, float)
    result = ev.evaluate(run_dir, echo=lambda *a: None)
    assert [p.rsplit("checkpoint", 1)[1] for p in result["checkpoints"]] == [f"{e}.pt" for e in range(90, 80, -1)]
    assert calls == [("test", 85.5)] and result["bleu"]["tokenized"]["score"] == 85.5
    assert result["protocol"] == "average of the last 10 epoch checkpoints up to epoch 90"
    assert ev.evaluate(run_dir, upper_bound=95, echo=lambda *a: None)["bleu"]["tokenized"]["score"] == 90.5


def test_upper_bound_needs_every_checkpoint(run):
    run_dir, _ = run(range(85, 96), {"average_last": 10, "checkpoint_upper_bound": 90}, float)
    with pytest.raises(ValueError, match="6 epoch checkpoints up to 90, not the 10 to average"):
        ev.evaluate(run_dir, echo=lambda *a: None)


def test_best_window_on_the_test_set_says_so(run):
    """InferenceIWSLT.py 250 300: 51 windows of 10, the best on test (the README: epochs 278-287)."""
    generate = {"window_search": {"size": 10, "last": [250, 300], "select_on": "test"}, "bleu": "tokenized"}
    run_dir, calls = run(range(1, 301), generate, lambda w: 40 - abs(w - 282.5))
    result = ev.evaluate(run_dir, echo=lambda *a: None)
    assert result["chosen_epochs"] == [278, 287] and len(result["windows"]) == 51
    assert result["bleu"]["tokenized"]["score"] == 40.0
    assert "chosen on the test set itself" in result["selection"] and "optimistic" in result["selection"]
    assert [subset for subset, _ in calls] == ["test"] * 52  # 51 windows, then the chosen one again


def test_best_window_ties_keep_the_earliest_and_valid_selection_scores_test_once(run):
    generate = {"window_search": {"size": 2, "last": [3, 6], "select_on": "valid"}}
    run_dir, calls = run(range(1, 7), generate, lambda w: 1.0)
    result = ev.evaluate(run_dir, echo=lambda *a: None)
    assert result["chosen_epochs"] == [2, 3] and result["selection"] == "chosen on the valid set"
    assert [subset for subset, _ in calls] == ["valid"] * 4 + ["test"]


def test_per_epoch_curve(run):
    run_dir, calls = run(range(1, 21), {"per_epoch": {"first": 1, "last": 15}, "bleu": "tokenized"}, lambda w: 2 * w)
    result = ev.evaluate(run_dir, echo=lambda *a: None)
    assert [point["epoch"] for point in result["curve"]] == list(range(1, 16))
    assert [w for _, w in calls] == [float(e) for e in range(1, 16)]  # single checkpoints, not averages
    assert result["bleu"]["tokenized"]["score"] == 30.0 and result["checkpoints"][0].endswith("checkpoint15.pt")
    run_dir.joinpath("checkpoints", "checkpoint7.pt").unlink()
    with pytest.raises(ValueError, match="no checkpoint7.pt"):
        ev.evaluate(run_dir, echo=lambda *a: None)


@pytest.mark.parametrize(
    "name, protocol",
    [
        ("iwslt14/tfixup", {"window_search": {"size": 10, "last": [250, 300], "select_on": "test"}}),
        ("iwslt14/admin_scripts/admin", {"average_last": 10, "checkpoint_upper_bound": 90}),
        ("iwslt14/preln", {"per_epoch": {"first": 1, "last": 15}}),
        ("wmt14/admin_scripts/admin", {"average_last": 10, "checkpoint_upper_bound": 100}),
    ],
)
def test_recipes_carry_their_authors_protocol(name, protocol):
    generate = load_recipe(name).data["generate"]
    assert {key: generate.get(key) for key in protocol} == protocol


@pytest.mark.parametrize("name", ["multi30k/tfixup", "multi30k/preln", "iwslt14_mini/tfixup", "iwslt14_mini/preln"])
def test_cpu_recipes_score_their_last_checkpoint(name):
    """The main job and the stability grid keep no epoch checkpoints: no window, no curve."""
    generate = load_recipe(name).data["generate"]
    assert not generate.get("window_search") and not generate.get("per_epoch") and generate["average_last"] == 1
