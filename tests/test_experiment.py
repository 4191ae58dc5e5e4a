"""The experiment harness (experiments/experiment.py) by itself: the status rule at its boundaries,
the thread policy, parallel runs, scaled recipes, resumable run directories and results files."""

import json
import math
import threading
import time

import pytest
from conftest import REPO

from fairseq_layernorm_plugins.experiments import curves, experiment
from fairseq_layernorm_plugins.experiments.curves import first_error

UNIGRAM = 8.07  # bits: the unigram entropy of Multi30k's training targets (docs/claims.md)


@pytest.mark.parametrize(
    "nll, expected",
    [
        (math.nan, "diverged"),
        (math.inf, "diverged"),
        (UNIGRAM + 7, "stalled"),
        (UNIGRAM, "stalled"),  # not below the unigram entropy: word frequencies at most
        (math.nextafter(UNIGRAM, 0), "trained"),
        (3.5, "trained"),
    ],
)
def test_status_rule_at_its_boundaries(nll, expected):
    assert curves.status(nll, UNIGRAM) == expected


def test_outcome_of_a_run_that_stopped_is_diverged_whatever_it_validated():
    logged = {"valid": [{"nll_loss": 9.0}, {"nll_loss": 4.0}], "train": []}
    assert experiment.Outcome(logged, 30.0, None, 1.0).status(UNIGRAM) == "trained"
    assert experiment.Outcome(logged, 0.0, "FloatingPointError", 1.0).status(UNIGRAM) == "diverged"
    assert experiment.Outcome({"valid": [], "train": []}, 0.0, None, 1.0).status(UNIGRAM) == "diverged"


@pytest.mark.parametrize("cores, jobs, threads", [(16, 1, 16), (16, 3, 5), (2, 2, 1), (2, 4, 1), (None, 2, 1)])
def test_thread_policy_gives_each_job_its_share_of_the_cores(cores, jobs, threads, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(experiment.os, "cpu_count", lambda: cores)
    assert experiment.threads_per_job(jobs) == threads and experiment.os.environ["OMP_NUM_THREADS"] == str(threads)
    assert experiment.threads_per_job(1) == threads  # set once: the first policy stands


def test_thread_policy_keeps_a_users_setting(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert experiment.threads_per_job(2) == 3


def test_parallel_runs_every_item_at_most_jobs_at_once(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    lock, running, most = threading.Lock(), [0], [0]

    def work(item):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return item * item

    assert dict(experiment.parallel(work, range(6), jobs=2)) == {i: i * i for i in range(6)}
    assert most[0] == 2


def test_model_size_is_one_dict_for_both_stacks():
    assert experiment.model_size(64) == {
        "encoder_embed_dim": 64,
        "decoder_embed_dim": 64,
        "encoder_ffn_embed_dim": 256,
        "decoder_ffn_embed_dim": 256,
        "encoder_attention_heads": 4,
        "decoder_attention_heads": 4,
    }
    assert experiment.model_size(64, ffn=128, heads=2)["decoder_ffn_embed_dim"] == 128


def test_scaled_recipe_sets_depth_size_and_budget_and_replaces_a_schedule_whole():
    scale = dict(updates=40, tokens=512, lr=[2e-3], log_interval=5)
    size = experiment.model_size(32)
    merged = experiment.scaled_recipe(
        "multi30k/tfixup", "3L-3L", size, **scale, overrides={"fairseq": {"lr_scheduler": {"warmup_updates": 7}}}
    )
    groups = merged.fairseq
    assert merged.data["depth"] == "3L-3L" and (
        groups["model"]["encoder_layers"],
        groups["model"]["decoder_layers"],
    ) == (3, 3)
    assert {k: groups["model"][k] for k in size} == size and groups["model"]["tfixup_qkv_bias"] == "zero"
    assert groups["optimization"]["lr"] == [2e-3] and groups["optimization"]["max_update"] == 40
    assert merged.tokens_per_update == groups["dataset"]["max_tokens"] == 512 and groups["common"]["log_interval"] == 5
    assert groups["lr_scheduler"]["decay_period"] == 300 and groups["lr_scheduler"]["warmup_updates"] == 7  # merged
    schedule = {"_name": "inverse_sqrt", "warmup_updates": 7, "warmup_init_lr": 2e-3}
    replaced = experiment.scaled_recipe("multi30k/tfixup", "3L-3L", size, **scale, schedule=schedule)
    assert replaced.fairseq["lr_scheduler"] == schedule  # T-Fixup's decay_period gone


def spec(updates, scheduler="inverse_sqrt", lr=1e-3):
    fairseq = {"lr_scheduler": {"_name": scheduler}, "optimization": {"lr": [lr], "max_update": updates}}
    return {"run": {"label": "r"}, "budget": {"updates": updates, "seed": 1}, "fairseq": fairseq}


def test_a_run_directory_is_kept_for_its_spec_or_a_longer_budget_and_removed_otherwise(tmp_path, capsys):
    run_dir = tmp_path / "r"
    experiment.open_run_dir(run_dir, spec(4), "r")
    (run_dir / "train.log").write_text("kept")
    experiment.open_run_dir(run_dir, spec(4), "r")
    assert (run_dir / "train.log").exists()

    experiment.open_run_dir(run_dir, spec(6), "r")  # longer, but nothing to go on from
    assert "spec changed" in capsys.readouterr().out and not (run_dir / "train.log").exists()
    assert json.loads((run_dir / "spec.json").read_text()) == spec(6)

    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "checkpoint_last.pt").write_text("")
    assert experiment.extended_from(run_dir) == []
    experiment.open_run_dir(run_dir, spec(8), "r")
    assert "budget extended from 6 to 8 updates" in capsys.readouterr().out
    assert (run_dir / "checkpoints" / "checkpoint_last.pt").exists()
    experiment.open_run_dir(run_dir, spec(8), "r")  # the same spec again: nothing more to record
    assert experiment.extended_from(run_dir) == [spec(6)["budget"]]

    converged = spec(10) | {"budget": {"updates": 10, "seed": 1, "patience": 5, "validate_every": 500}}
    assert experiment.extends(spec(8), converged)  # trained on until validation stops improving
    assert not experiment.extends(spec(8), spec(10) | {"budget": {"updates": 10, "seed": 2}})
    assert not experiment.extends(spec(8), spec(10, scheduler="cosine"))  # its schedule depends on the budget
    assert not experiment.extends(spec(8), spec(10, lr=2e-3)) and not experiment.extends(spec(8), spec(6))
    experiment.open_run_dir(run_dir, spec(10, lr=2e-3), "r")
    assert "spec changed" in capsys.readouterr().out and not (run_dir / "checkpoints").exists()


def test_a_fairseq_default_written_out_is_the_same_run(tmp_path, capsys):
    """An option set to fairseq's own default (the authors' ``--clip-norm 0.0``) is the option
    left unset: the run directory is kept and the specs are the same run; any other value, a
    boolean for a number, and model options (set by the arch function) are differences."""
    from fairseq_layernorm_plugins.recipes import specs

    plain = spec(4)
    plain["fairseq"]["optimizer"] = {"_name": "radam", "weight_decay": 1e-4}
    spelled = json.loads(json.dumps(plain))
    spelled["fairseq"]["optimization"] |= {"clip_norm": 0.0, "max_epoch": 0}
    spelled["fairseq"]["optimizer"] |= {"radam_foreach": False, "adam_eps": 1e-8}  # the plugin's RAdam's defaults
    spelled["fairseq"]["common"] = {"seed": 1, "fp16": False}
    spelled["fairseq"]["checkpoint"] = {"keep_last_epochs": -1}
    assert specs.same_run(plain, spelled) and specs.without_defaults(spelled) == specs.without_defaults(plain)
    run_dir = tmp_path / "r"
    experiment.open_run_dir(run_dir, plain, "r")
    (run_dir / "train.log").write_text("kept")
    experiment.open_run_dir(run_dir, spelled, "r")
    assert (run_dir / "train.log").exists() and "spec changed" not in capsys.readouterr().out
    for group, option, value in [
        ("optimization", "clip_norm", 0.1),
        ("optimizer", "radam_foreach", True),
        ("common", "seed", 2),
        ("common", "fp16", 0),  # not a boolean
        ("model", "dropout", 0.0),  # the arch function's default, not a dataclass's
    ]:
        other = json.loads(json.dumps(plain))
        other["fairseq"].setdefault(group, {})[option] = value
        assert not specs.same_run(plain, other), (group, option)
    assert specs.fairseq_defaults("optimization")["lr"] == [0.25] and specs.fairseq_defaults("model") == {}
    assert specs.fairseq_defaults("optimizer", "no_such_optimizer") == {}


def test_an_architecture_default_is_recorded_and_a_change_to_it_trains_again(tmp_path, monkeypatch, capsys):
    """A run records the options its arch function filled in, as fairseq-train resolves them
    (checked against fairseq's own parser); writing one out is no change, changing the arch's
    default is one (the run trains again), and a spec recorded before runs recorded them is
    compared on its written options."""
    from fairseq import options
    from fairseq.models import ARCH_CONFIG_REGISTRY

    from fairseq_layernorm_plugins.recipes import specs

    arch = "transformer_residual_iwslt_de_en"
    written = spec(4)
    written["fairseq"]["model"] = {"_name": arch, "encoder_layers": 2, "dropout": 0.2}
    before = specs.recorded(written)
    filled = before["arch_defaults"]
    assert filled["init_style"] == "fairseq" and "encoder_layers" not in filled and "dropout" not in filled
    parser = options.get_training_parser()
    cli = ["data", "--user-dir", str(REPO / "fairseq_layernorm_plugins"), "--arch", arch, "--encoder-layers", "2"]
    parsed = vars(options.parse_args_and_arch(parser, [*cli, "--dropout", "0.2"]))
    for key, value in filled.items():
        assert json.loads(json.dumps(parsed[key], default=str)) == value, key
    assert parsed["encoder_layers"] == 2 and filled["decoder_layers"] == 6

    spelled = json.loads(json.dumps(written))
    spelled["fairseq"]["model"]["init_style"] = "fairseq"  # the arch's default, written out
    assert specs.same_run(before, specs.recorded(spelled))
    assert specs.same_run(written, before)  # recorded before arch defaults were: its written options
    run_dir = tmp_path / "r"
    experiment.open_run_dir(run_dir, before, "r")
    (run_dir / "train.log").write_text("kept")

    resolve = ARCH_CONFIG_REGISTRY[arch]

    def paper_init(args):  # the same arch with another default
        args.init_style = getattr(args, "init_style", "paper")
        resolve(args)

    monkeypatch.setitem(ARCH_CONFIG_REGISTRY, arch, paper_init)
    after = specs.recorded(written)
    assert after["arch_defaults"] == filled | {"init_style": "paper"}
    assert not specs.same_run(before, after) and specs.same_run(specs.recorded(spelled), before)
    experiment.open_run_dir(run_dir, after, "r")
    assert "spec changed" in capsys.readouterr().out and not (run_dir / "train.log").exists()
    assert specs.recorded(spec(4)) == spec(4) and specs.arch_defaults({"_name": "no_such_arch"}) == {}


def test_results_file_keeps_its_budget_and_the_commands_that_made_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    path = tmp_path / "out.json"
    results = experiment.Results(path, {"updates": 4}, "first", "cells")
    done = {}
    results.train(lambda item: {"item": item}, ["a", "b"], 2, done, lambda item: item, lambda i, r: f"{i} done")
    lines = capsys.readouterr().out.splitlines()  # one line per run as it ends, in either order
    assert [line[:6] for line in lines] == ["[1/2] ", "[2/2] "] and {line[6:] for line in lines} == {"a done", "b done"}
    written = json.loads(path.read_text())
    assert written["commands"] == ["first"] and written["budget"] == {"updates": 4}
    assert sorted(r["item"] for r in written["cells"]) == ["a", "b"]

    again = experiment.Results(path, {"updates": 4}, "first", "cells")
    assert again.commands == ["first"] and len(again.records) == 2
    assert experiment.Results(path, {"updates": 4}, "second", "cells").commands == ["first", "second"]
    # a budget entry added since the file was written: its value then is ``earlier``'s
    grown = experiment.Results(path, {"updates": 4, "optimizer": "adam"}, "c", "cells", earlier={"optimizer": "adam"})
    assert len(grown.records) == 2
    with pytest.raises(SystemExit, match=r"out\.json holds cells made with \{'updates': 4\}, not \{'updates': 5\}"):
        experiment.Results(path, {"updates": 5}, "third", "cells")


def test_results_written_by_two_commands_at_once_keep_each_others_records(tmp_path):
    path = tmp_path / "out.json"
    experiment.Results(path, {"updates": 4}, "made stale", "runs").write([{"label": "stale"}])
    a = experiment.Results(path, {"updates": 4}, "a", "runs")  # both read the file before either writes
    b = experiment.Results(path, {"updates": 4}, "b", "runs")
    assert a.write([{"label": "x"}]) == [{"label": "x"}]  # a leaves out the record it read: it stays out
    assert b.write([{"label": "y"}]) == [{"label": "y"}, {"label": "x"}]
    # a's record replaced by a's newer one, not kept beside it; b's kept
    assert a.write([{"label": "x", "new": 1}, {"label": "z"}]) == [
        {"label": "x", "new": 1},
        {"label": "z"},
        {"label": "y"},
    ]
    written = json.loads(path.read_text())
    assert written["runs"] == [{"label": "x", "new": 1}, {"label": "z"}, {"label": "y"}]
    assert written["commands"] == ["made stale", "a", "b"]


def test_seeds_have_their_own_paths_and_results(tmp_path):
    first = tmp_path / "toy"
    assert experiment.seed_path(first, 1) == first and experiment.seed_path(first, 2) == tmp_path / "toy-seed2"
    for name, seed in (("toy", 1), ("toy-seed2", 2), ("toy-init-paper", 7)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"budget": {"seed": seed}}))
    assert sorted(experiment.seed_results(first)) == [1, 2]  # toy-init-paper is another experiment


def test_first_error_names_why_fairseq_stopped(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("| train_inner | {}\nFloatingPointError: Minimum loss scale reached (0.0001).\nTraceback\n")
    assert first_error(log) == "FloatingPointError: Minimum loss scale reached (0.0001)."
    log.write_text("| train_inner | {}\ndone training\n")
    assert first_error(log) is None
