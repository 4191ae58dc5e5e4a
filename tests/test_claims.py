"""scripts/claims.py end to end on real Multi30k with a toy claim: warm-up vs no warm-up as the
schedule the docstring promises, validation BLEU at each validation, the report files,
resuming, retraining a run whose spec changed, and refusing another budget."""

import argparse
import dataclasses
import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_cli, shared_data

sys.path.insert(0, str(REPO / "scripts"))
import claims  # noqa: E402

from fairseq_layernorm_plugins.experiments import render  # noqa: E402
from fairseq_layernorm_plugins.experiments.claim import Claim, Run, load_claims  # noqa: E402


def test_claims_are_read_from_their_yaml_file_and_a_bad_field_names_the_file(tmp_path):
    """configs/claims.yaml: one run per method from ``runs_of`` (an alias of a list among the
    methods counts as its methods), and an unknown field is one error naming the file and claim."""
    claims_by_name = load_claims()
    assert claims.CLAIMS == claims_by_name and "shallow" in claims_by_name
    newer = claims_by_name["newer-nowarmup"]
    assert [r.label for r in newer.runs[:3]] == ["preln no warm-up", "postln no warm-up", "periln no warm-up"]
    assert all(r.warmup == 0 for r in newer.runs) and len(newer.runs) == 11
    assert claims_by_name["admin"].run("preln radam admin-dropout").model == {
        "attention_dropout": 0.1,
        "activation_dropout": 0.1,
    }
    bad = tmp_path / "claims.yaml"
    bad.write_text(
        "claims:\n  x: {paper: p, statement: s, depth: 1L, width: 8, lr: 0.1, decay_after: 1, "
        "runs: [], baseline: b, widht: 9}\n"
    )
    with pytest.raises(ValueError, match=rf"^{bad}: claim 'x': .*widht"):
        load_claims(bad)


TOY = Claim(
    paper="toy",
    statement="toy",
    depth="1L-1L",
    width=16,
    lr=1e-3,
    decay_after=300,
    runs=(Run("postln warm-up", "postln", warmup=300), Run("preln no warm-up", "preln")),
    baseline="postln warm-up",
)


VALID_LINES = 50  # of Multi30k's 1,014 validation sentences, each decoded at every validation (--eval-bleu)


@pytest.fixture(scope="module")
def multi30k(tmp_path_factory):
    """Multi30k prepared once for this file's claims (20 test lines), as ``claims.py`` prepares it,
    then its validation set cut to VALID_LINES evenly spaced sentences (``claims_data``): what
    these tests check of a validation (when it happens, that it is scored, what it is scored
    by) does not depend on how many sentences it decodes."""
    from helpers.claims_data import keep_valid_lines

    from fairseq_layernorm_plugins.experiments import experiment

    shared_data("multi30k", "task1_raw")
    data = tmp_path_factory.mktemp("multi30k")
    experiment.prepare_corpus("multi30k", data, test_lines=20)
    keep_valid_lines(data, VALID_LINES)
    return data


def end_of_epoch_lr(run_dir):
    from fairseq_layernorm_plugins.experiments.curves import log_record

    records = [
        r for k, r in filter(None, map(log_record, (run_dir / "train.log").read_text().splitlines())) if k == "train"
    ]
    return float(records[-1]["train_lr"])


def test_a_copy_prepared_elsewhere_is_used_where_the_raw_files_cannot_be_had(tmp_path, capsys, monkeypatch, multi30k):
    """A node with neither network nor ../shared (a GPU node) trains from data/multi30k.de-en
    copied to it, as long as the copy was prepared with the same options and is complete."""
    from fairseq_layernorm_plugins.experiments import experiment
    from fairseq_layernorm_plugins.prepare import fetch
    from fairseq_layernorm_plugins.prepare import multi30k as multi30k_data

    monkeypatch.setattr(multi30k_data, "default_raw_dir", lambda: None)  # no ../shared
    monkeypatch.setattr(fetch.time, "sleep", lambda seconds: None)
    offline = dict(download_dir=tmp_path / "downloads", url=(tmp_path / "unreachable" / "{name}").as_uri())
    copy = tmp_path / "multi30k.de-en"
    shutil.copytree(multi30k, copy)
    stamp = experiment.prepare_corpus("multi30k", copy, test_lines=20, **offline)
    assert stamp == json.loads((multi30k / "stamp.json").read_text())
    err = capsys.readouterr().err
    assert "warning: cannot check" in err and "download failed" in err and "multi30k.test_2016_flickr.20" in err
    with pytest.raises(SystemExit, match="download failed"):  # prepared with 20 test lines, asked for all
        experiment.prepare_corpus("multi30k", copy, **offline)
    with pytest.raises(SystemExit, match="file not found"):  # a raw folder named by the user is never bypassed
        experiment.prepare_corpus("multi30k", copy, test_lines=20, raw_dir=tmp_path)
    stamp_path = copy / "stamp.json"
    stamp_path.write_text(json.dumps({**stamp, "sentencepiece": None, "merges": 10000}))
    with pytest.raises(SystemExit, match="download failed"):  # other subwords
        experiment.prepare_corpus("multi30k", copy, test_lines=20, **offline)
    stamp_path.write_text(json.dumps(stamp))
    for path in (copy / "bin").glob("train*"):
        path.unlink()
    with pytest.raises(SystemExit, match="download failed"):  # a copy without its training set
        experiment.prepare_corpus("multi30k", copy, test_lines=20, **offline)


def test_first_update_reaching():
    record = {"valid": [{"update": 2, "bleu": 1.0}, {"update": 4, "bleu": None}, {"update": 6, "bleu": 3.0}]}
    assert render.first_update_reaching(record, 1.0) == 2
    assert render.first_update_reaching(record, 2.0) == 6
    assert render.first_update_reaching(record, 3.5) is None
    assert render.first_update_reaching(record, None) is None  # the baseline has no BLEU


@pytest.mark.slow(2)
def test_toy_claim_end_to_end(tmp_path, monkeypatch, capsys, multi30k):
    monkeypatch.setitem(claims.CLAIMS, "toy", TOY)
    args = ["toy", "--updates", "4", "--validate-every", "2", "--test-lines", "20", "--jobs", "2"]
    args += ["--data-dir", str(multi30k), "--runs", str(tmp_path / "runs")]
    claims.main(args)
    out = tmp_path / "runs" / "toy"
    result = json.loads(out.with_suffix(".json").read_text())
    runs = {r["label"]: r for r in result["runs"]}
    assert set(runs) == {"postln warm-up", "preln no warm-up"}
    for record in runs.values():
        assert [v["update"] for v in record["valid"]] == [2, 4]
        assert all(v["bleu"] is not None for v in record["valid"])  # fairseq's --eval-bleu ran
        assert record["updates"] == 4 and record["status"] in ("trained", "stalled")
    # warm-up: linear from 1e-7 over 300 updates; no warm-up: the peak from the first update
    assert end_of_epoch_lr(out / "postln_warm-up") == pytest.approx(1e-7 + 4 * (1e-3 - 1e-7) / 300, rel=1e-3)
    assert end_of_epoch_lr(out / "preln_no_warm-up") == pytest.approx(1e-3)
    markdown = out.with_suffix(".md").read_text()
    assert "| postln warm-up | adam | 300 |" in markdown and "| preln no warm-up | adam | none |" in markdown
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len((out / "preln_no_warm-up" / "test.hyp.detok.en").read_text().splitlines()) == 20

    capsys.readouterr()
    claims.main(args)  # resumes: nothing to train
    assert "2 of 2 runs done; training 0" in capsys.readouterr().out

    monkeypatch.setitem(claims.CLAIMS, "toy", Claim(**{**TOY.__dict__, "width": 32}))
    claims.main([*args, "--runs-only", "preln no warm-up"])  # another spec: trained again from scratch
    printed = capsys.readouterr().out
    assert "0 of 1 runs done; training 1" in printed
    assert "[preln no warm-up] spec changed: training again from scratch" in printed
    assert "--runs-only 'preln no warm-up'" in out.with_suffix(".md").read_text()  # the command as typed
    assert (
        json.loads((out / "preln_no_warm-up" / "spec.json").read_text())["fairseq"]["model"]["encoder_embed_dim"] == 32
    )
    result = json.loads(out.with_suffix(".json").read_text())
    # OUT.json holds the runs of the claim as it now is: the other run's old record is gone
    assert [(r["label"], r["spec"]["fairseq"]["model"]["encoder_embed_dim"]) for r in result["runs"]] == [
        ("preln no warm-up", 32)
    ]

    with pytest.raises(SystemExit, match="holds runs made with"):
        claims.main([a if a != "4" else "6" for a in args])

    # more updates (to convergence: --patience), same schedule: the run goes on from update 4
    # instead of starting again
    longer = [a if a != "4" else "6" for a in args] + [
        "--runs-only",
        "preln no warm-up",
        "--patience",
        "3",
        "--out",
        str(tmp_path / "long"),
    ]
    claims.main(longer)
    printed = capsys.readouterr().out
    assert "[preln no warm-up] budget extended from 4 to 6 updates: resuming from its last checkpoint" in printed
    assert "spec changed" not in printed
    extended = json.loads((tmp_path / "long.json").read_text())["runs"][0]
    assert [v["update"] for v in extended["valid"]] == [2, 4, 6]
    assert extended["valid"][:2] == result["runs"][0]["valid"]  # the shorter run's validations, kept
    assert extended["extended_from"] == [result["budget"]] and "extended_from" not in result["runs"][0]
    assert "Went on from the checkpoint of a shorter run: preln no warm-up (4 updates, validated every 2)" in (
        (tmp_path / "long.md").read_text()
    )
    # the first 4 updates were not trained again: fairseq went on from the update-4 checkpoint
    assert "checkpoint_last.pt (epoch 1 @ 4 updates)" in (out / "preln_no_warm-up" / "train.log").read_text()

    seed1_spec = (out / "preln_no_warm-up" / "spec.json").read_text()
    capsys.readouterr()
    # seeds 2 and 3 in one queue: each its own directory and OUT-seedN; seed 1's run done already
    claims.main([*args, "--runs-only", "preln no warm-up", "--seed", "1", "2", "3"])
    assert "1 of 3 runs done (seeds 1, 2, 3); training 2, 2 at once" in capsys.readouterr().out
    assert (out / "preln_no_warm-up" / "spec.json").read_text() == seed1_spec  # seed 1's run untouched
    for seed in (2, 3):
        spec = json.loads((tmp_path / "runs" / f"toy-seed{seed}" / "preln_no_warm-up" / "spec.json").read_text())
        result = json.loads((tmp_path / "runs" / f"toy-seed{seed}.json").read_text())
        assert spec["budget"]["seed"] == result["budget"]["seed"] == seed
        assert [r["spec"]["budget"]["seed"] for r in result["runs"]] == [seed]
        assert (tmp_path / "runs" / f"toy-seed{seed}.md").exists()
    assert "| preln no warm-up | 1, 2, 3 |" in (tmp_path / "runs" / "toy-seeds.md").read_text()


@pytest.mark.slow(1)
def test_patience_stops_a_run_and_scores_its_best_checkpoint(tmp_path, monkeypatch, multi30k):
    """``--patience 2``: at lr 0 the validation loss never improves after the first validation
    (update 2), so the run stops at the second one after it (update 6), far below the cap,
    and the test set is translated by checkpoint_best.pt."""
    frozen = Claim(**{**TOY.__dict__, "lr": 0.0, "runs": (Run("preln no warm-up", "preln"),)})
    monkeypatch.setitem(claims.CLAIMS, "toy", frozen)
    args = ["toy", "--updates", "40", "--validate-every", "2", "--patience", "2", "--test-lines", "20"]
    claims.main([*args, "--data-dir", str(multi30k), "--runs", str(tmp_path / "runs")])
    out = tmp_path / "runs" / "toy"
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["budget"]["patience"] == 2
    (record,) = result["runs"]
    assert [v["update"] for v in record["valid"]] == [2, 4, 6]
    assert record["updates"] == 6 and record["best_update"] == 2 and record["stopped_early"]
    scored = json.loads((out / "preln_no_warm-up" / "results.json").read_text())
    assert [Path(c).name for c in scored["checkpoints"]] == ["checkpoint_best.pt"]
    # beside it, the papers' protocol: the mean of the last update checkpoints (here the 3 there are), scored in
    # average5/; at lr 0 every checkpoint holds the same weights, so the mean translates as the best one does
    assert [name.rsplit("_", 1)[1] for name in record["averaged"]] == ["2.pt", "4.pt", "6.pt"]
    averaged = json.loads((out / "preln_no_warm-up" / "average5" / "results.json").read_text())
    assert [Path(c).name for c in averaged["checkpoints"]] == record["averaged"][::-1]  # newest first
    assert record["test_bleu_averaged"] == averaged["bleu"]["sacrebleu"]["score"] == record["test_bleu"]
    assert not list((out / "preln_no_warm-up").rglob("checkpoint_avg*.pt"))  # the mean is not kept
    assert (out / "preln_no_warm-up" / "average5" / "test.hyp.detok.en").read_text() == (
        out / "preln_no_warm-up" / "test.hyp.detok.en"
    ).read_text()
    markdown = out.with_suffix(".md").read_text()
    assert "| preln no warm-up | 6 | 2 | yes | 3: updates 2-6 |" in markdown
    assert f"| {record['test_bleu']:.2f} | {record['test_bleu_averaged']:.2f} |" in markdown
    assert "| not validated |" in markdown  # no update 2000 in 6


def test_a_converged_run_is_shown_early_and_at_its_best():
    """The converged note sets each run's validation at update 2000 (the fixed-budget claims'
    end) beside the one of the checkpoint it is scored by."""
    valid = [{"update": 1000, "nll": 4.5, "bleu": 30.0}, {"update": 2000, "nll": 4.25, "bleu": 33.5}]
    valid += [{"update": 2500, "nll": 4.0, "bleu": 36.0}, {"update": 3000, "nll": 4.125, "bleu": 36.5}]
    budget = {"patience": 1, "validate_every": 500, "updates": 30000}
    record = {"label": "r", "spec": {"budget": budget}, "valid": valid, "updates": 3000, "best_update": 2500}
    record |= {"stopped_early": True, "averaged": ["checkpoint_9_2500.pt", "checkpoint_11_3000.pt"], "train_hours": 1.5}
    (row,) = [line for line in render.converged_note([record]) if line.startswith("| r |")]
    assert row == "| r | 3000 | 2500 | yes | 2: updates 2500-3000 | 1.5 | 4.250 / 33.50 | 4.000 / 36.00 |"


def test_converged_plot_adds_the_late_nll_and_crosses_runs_with_model_options(monkeypatch):
    """A converged claim's plot has a third panel, the validation NLL from update 2000 on (its
    y range fitted to those validations, finished or training runs', not a stalled one's),
    unless no run got past update 2000; a run with model options of its own is drawn with
    crosses."""
    figures = []
    monkeypatch.setattr(render, "save_report", lambda fig, out, lines: figures.append(fig))
    valid = [{"update": 1000, "nll": 4.5, "bleu": 30.0}, {"update": 2000, "nll": 4.25, "bleu": 33.5}]
    valid += [{"update": 2500, "nll": 4.0, "bleu": 36.0}, {"update": 3000, "nll": 4.125, "bleu": 36.5}]
    spec = {"budget": {"patience": 1, "validate_every": 500, "updates": 30000}, "fairseq": {"model": {}}}
    record = {"label": "postln warm-up", "method": "postln", "optimizer": "adam", "warmup": 300, "valid": valid}
    record |= {
        "spec": {**spec, "run": {}},
        "status": "trained",
        "test_bleu": 30.0,
        "updates": 3000,
        "best_update": 2500,
    }
    control = {**record, "label": "preln no warm-up", "method": "preln", "spec": {**spec, "run": {"model": {"a": 1}}}}
    short = {**record, "updates": 1000, "valid": valid[:1], "best_update": 1000}  # converged before update 2000
    fixed = {k: v for k, v in record.items() if k != "best_update"}
    for records, panels in (([record, control], 3), ([fixed], 2), ([short | {"stopped_early": True}], 2)):
        records = [r | ({"stopped_early": True} if panels == 3 else {}) for r in records]
        render.claim_report("toy", TOY, records, [], "unused", 8.0)
        assert len(figures[-1].axes) == panels
    late = figures[0].axes[2]
    assert late.get_xlim()[0] == 2000 and late.get_ylim() == pytest.approx((4.0 - 0.02, 4.25 + 0.02))
    markers = {line.get_label(): line.get_marker() for line in late.get_lines() if not line.get_label().startswith("_")}
    assert markers == {"postln warm-up": ".", "preln no warm-up": "x"}
    still = [r | {"status": "training", "test_bleu": None, "stopped_early": False} for r in (record, control)]
    stuck = [{"update": u, "nll": 9.0, "bleu": 0.1} for u in (1000, 2000, 2500)]  # stalled so far: not zoomed on
    stuck = still[1] | {"valid": stuck, "health": "stalled", "best_update": 2500}
    render.claim_report("toy", TOY, still, [], "unused", 8.0)  # --report-only: the same zoom
    assert figures[-1].axes[2].get_ylim() == pytest.approx((4.0 - 0.02, 4.25 + 0.02))
    render.claim_report("toy", TOY, [still[0], stuck], [], "unused", 8.0)
    assert figures[-1].axes[2].get_ylim() == pytest.approx((4.0 - 0.02, 4.25 + 0.02))


@pytest.mark.slow(1)
def test_precision_trains_every_run_in_fp16_and_reports_its_loss_scale(tmp_path, monkeypatch, capsys, multi30k):
    """``--precision fp16``: fairseq's --fp16 (on this CPU), runs in RUNS/CLAIM-fp16, the
    precision in each run's spec, and the loss scale in the report (at each logged update: the
    claims log every 25 updates, here every 2, so that 4 fp16 updates log it twice)."""
    from fairseq_layernorm_plugins.experiments import claim

    monkeypatch.setattr(claim, "LOG_INTERVAL", 2)
    monkeypatch.setitem(claims.CLAIMS, "toy", Claim(**{**TOY.__dict__, "runs": TOY.runs[1:]}))
    args = ["toy", "--updates", "4", "--validate-every", "2", "--test-lines", "20", "--precision", "fp16"]
    claims.main([*args, "--data-dir", str(multi30k), "--runs", str(tmp_path / "runs")])
    out = tmp_path / "runs" / "toy-fp16"
    (record,) = json.loads(out.with_suffix(".json").read_text())["runs"]
    assert record["spec"]["precision"] == "fp16" and record["updates"] == 4  # logged every 2
    assert json.loads(out.with_suffix(".json").read_text())["budget"]["precision"] == "fp16"
    with pytest.raises(SystemExit, match="holds runs made with"):  # fp16 runs are not added to an fp32 OUT
        claims.main([*args[:-2], "--data-dir", str(multi30k), "--runs", str(tmp_path / "runs"), "--out", str(out)])
    assert record["loss_scale_min"] >= 1 and record["loss_scale_last"] >= record["loss_scale_min"]
    assert '"loss_scale"' in (out / "preln_no_warm-up" / "train.log").read_text()  # fairseq's fp16 optimizer
    markdown = out.with_suffix(".md").read_text()
    assert "Precision: fp16." in markdown and "| loss scale min / last |" in markdown
    assert [u for u, _ in record["loss_scales"]] == [2, 4] and record["loss_scales"][-1][1] == record["loss_scale_last"]
    scale = f"| {record['loss_scale_min']:g} / {record['loss_scale_last']:g}, {record['overflows']} overflows |"
    assert markdown.splitlines()[-1].startswith("| preln no warm-up |") and scale in markdown

    # the same run in fp32, then the fp16 claim again (nothing left to train) beside it
    where = ["--data-dir", str(multi30k), "--runs", str(tmp_path / "runs")]
    claims.main([*args[:-2], *where, "--out", str(tmp_path / "fp32")])
    (fp32,) = json.loads((tmp_path / "fp32.json").read_text())["runs"]
    claims.main([*args, *where, "--against", str(tmp_path / "fp32.json")])
    beside = (tmp_path / "runs" / "toy-fp16-vs-fp32.md").read_text()
    assert (tmp_path / "runs" / "toy-fp16-vs-fp32.png").is_file()
    assert (
        f"| preln no warm-up | {fp32['status']} | {record['status']} | {fp32['valid'][-1]['nll']:.3f} | "
        f"{record['valid'][-1]['nll']:.3f} | {fp32['test_bleu']:.2f} | {record['test_bleu']:.2f} | "
        f"{record['test_bleu'] - fp32['test_bleu']:+.2f} {scale}"
    ) in beside.splitlines()
    assert "Settings that differ" not in beside  # the same spec but for the precision
    for against, error in (
        (out.with_suffix(".json"), "holds fp16 runs, the precision this command trains in"),
        (tmp_path / "nothing.json", "No such file"),
        (tmp_path / "runs" / "toy-fp16-vs-fp32.md", "Expecting value"),
    ):
        with pytest.raises(SystemExit):
            claims.main([*args, *where, "--against", str(against)])
        err = capsys.readouterr().err
        assert f"--against: {against}" in err and error in err
    with pytest.raises(SystemExit):  # the fp32 runs were made with another budget
        claims.main([*args[:2], "6", *args[3:], *where, "--against", str(tmp_path / "fp32.json")])
    assert "holds runs made with" in capsys.readouterr().err


@pytest.mark.slow(1)
def test_device_cuda_trains_each_run_on_the_gpu_and_says_so(tmp_path, monkeypatch, capsys, multi30k):
    """``--device cuda``: refused where torch sees no GPU; otherwise each run is launched on one
    GPU (no fairseq ``--cpu``, a world of one GPU) and decoded there, its record and the report
    say so, and its spec is the CPU run's: a run begun on a CPU goes on on the GPU, and its record
    names both. The launches are checked here, then trained on this CPU."""
    import torch

    from fairseq_layernorm_plugins.experiments import experiment
    from fairseq_layernorm_plugins.runs import evaluate
    from fairseq_layernorm_plugins.runs.launch import Launch

    monkeypatch.setitem(claims.CLAIMS, "toy", Claim(**{**TOY.__dict__, "runs": TOY.runs[1:]}))
    args = ["toy", "--validate-every", "2", "--test-lines", "20", "--updates"]
    where = ["--data-dir", str(multi30k), "--runs", str(tmp_path / "runs")]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        claims.main([*args, "4", "--device", "cuda", *where])
    assert "--device cuda: torch sees no CUDA device here" in capsys.readouterr().err

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    launched, decoded, train, score = [], [], experiment.run_training, evaluate.evaluate

    def on_this_cpu(recipe, run_dir, data, seed, extra=(), precision=None, cpu_workers=1):
        launch = Launch(recipe, "DATA", "SAVE", cpu_workers=cpu_workers, precision=precision, seed=seed)
        launched.append((cpu_workers, launch.fairseq_args()))
        return train(recipe, run_dir, data, seed, extra, precision, cpu_workers=1)

    def decoding(*args, cpu=None, **kwargs):
        decoded.append(cpu)
        return score(*args, cpu=True, **kwargs)

    monkeypatch.setattr(experiment, "run_training", on_this_cpu)
    monkeypatch.setattr(evaluate, "evaluate", decoding)
    claims.main([*args, "2", "--device", "cpu", *where, "--out", str(tmp_path / "first")])  # begun on a CPU
    claims.main([*args, "4", "--device", "cuda", *where])  # goes on on the GPU
    (cpu_workers, cpu_args), (workers, fairseq_args) = launched
    assert (cpu_workers, workers, decoded) == (1, 0, [True, False])
    assert "--cpu" in cpu_args and "--cpu" not in fairseq_args
    world = fairseq_args.index("--distributed-world-size")
    assert fairseq_args[world + 1] == "1"  # not every GPU the node has
    (record,) = json.loads((tmp_path / "runs" / "toy.json").read_text())["runs"]
    assert record["device"] == "cpu+cuda" and record["updates"] == 4
    markdown = (tmp_path / "runs" / "toy.md").read_text()
    assert "Trained on a GPU: preln no warm-up (cpu+cuda); the others on a CPU." in markdown
    capsys.readouterr()
    claims.main([*args, "4", "--device", "cpu", *where])  # the same run: nothing to train again on a CPU
    assert "toy: 1 of 1 runs done; training 0" in capsys.readouterr().out and len(launched) == 2

    # the report of what a GPU made, written again here: the run not yet made is not trained
    # (on a machine without a GPU, the GPU command itself; a seed with nothing made gets no report)
    monkeypatch.setitem(claims.CLAIMS, "toy", TOY)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    report, results = tmp_path / "runs" / "toy.md", (tmp_path / "runs" / "toy.json").read_text()
    report.unlink()
    claims.main([*args, "4", "--device", "cuda", *where, "--seed", "1", "2", "--report-only"])
    assert "toy: 1 of 4 runs done (seeds 1, 2); training 0" in capsys.readouterr().out and len(launched) == 2
    assert report.read_text() == markdown  # the GPU call's report; this command not among its makers
    assert (tmp_path / "runs" / "toy.json").read_text() == results
    assert not (tmp_path / "runs" / "toy-seed2.md").exists()


def test_two_commands_filling_one_claim_at_once_keep_both_runs(tmp_path, monkeypatch, capsys, multi30k):
    """Two ``claims.py`` commands on one OUT, each with its ``--runs-only``: the one that ends
    last keeps the other's run in OUT.json and reports both (its training faked here)."""
    monkeypatch.setitem(claims.CLAIMS, "toy", TOY)
    args = ["toy", "--updates", "4", "--test-lines", "20", "--data-dir", str(multi30k), "--runs", str(tmp_path)]

    def trained(claim, run, args_of_run):
        if run.label == "postln warm-up":  # the other command starts and ends while this run trains
            claims.main([*args, "--runs-only", "preln no warm-up"])
        spec = claims.run_spec(claim, run, args_of_run)[1]
        record = {"label": run.label, "method": run.method, "optimizer": run.optimizer, "warmup": run.warmup}
        record |= {"spec": spec, "status": "trained", "valid": [{"update": 4, "nll": 5.0, "bleu": 1.0}]}
        return record | {"train_loss": 5.0, "test_bleu": 2.0, "updates": 4, "minutes": 0.1}

    monkeypatch.setattr(claims, "train_run", trained)
    claims.main([*args, "--runs-only", "postln warm-up"])
    result = json.loads((tmp_path / "toy.json").read_text())
    assert [r["label"] for r in result["runs"]] == ["postln warm-up", "preln no warm-up"]
    assert [c.split("--runs-only ")[1] for c in result["commands"]] == ["'postln warm-up'", "'preln no warm-up'"]
    markdown = (tmp_path / "toy.md").read_text()
    assert "| postln warm-up | adam | 300 | trained |" in markdown and "| preln no warm-up | adam | none |" in markdown
    capsys.readouterr()
    claims.main(args)
    assert "toy: 2 of 2 runs done; training 0" in capsys.readouterr().out


def test_report_only_shows_the_runs_still_training_from_their_logs(tmp_path, monkeypatch, capsys, multi30k):
    """``--report-only`` while a claim's runs train (another process, to convergence): a run with
    a validated train.log and no record in OUT.json is reported from its log as far as it has
    trained, marked "training" (its best update so far, no test score) and, once patience has
    stopped it, "ended, not scored", and "training (stalled)" while its last validation is
    not below the unigram entropy; OUT.json stays as it was, and a run directory made with
    another spec is not reported. Where it stood is kept in OUT-unfinished.json: once its run
    directory is gone it is reported from there, "stopped", until it is finished."""
    monkeypatch.setitem(claims.CLAIMS, "toy", TOY)
    args = ["toy", "--updates", "400", "--patience", "3", "--validate-every", "100", "--test-lines", "20"]
    args += ["--data-dir", str(multi30k), "--runs", str(tmp_path)]
    seen = []

    def trained(claim, run, args_of_run):  # the baseline's run, finished (faked)
        seen.append(args_of_run)
        record = {"label": run.label, "method": run.method, "optimizer": run.optimizer, "warmup": run.warmup}
        record |= {"spec": claims.run_spec(claim, run, args_of_run)[1], "status": "trained", "updates": 400}
        record |= {"valid": [{"update": 400, "nll": 5.0, "bleu": 1.0}], "best_update": 400, "stopped_early": False}
        return record | {"train_loss": [], "test_bleu": 2.0, "minutes": 0.1}

    monkeypatch.setattr(claims, "train_run", trained)
    claims.main([*args, "--runs-only", "postln warm-up"])
    (args_of_run,) = seen
    results = (tmp_path / "toy.json").read_text()
    preln = TOY.runs[1]
    run_dir = claims.claim_dir(args_of_run) / preln.key  # the run another process trains
    run_dir.mkdir(parents=True)
    spec = claims.run_spec(TOY, preln, args_of_run)[1]
    (run_dir / "spec.json").write_text(json.dumps(spec))
    log = ["2026-11-27 10:00:00 | INFO | fairseq_cli.train | begin training"]
    for update, loss, bleu in ((100, 8.0, 1.2), (200, 7.0, 2.0), (300, 7.2, 1.8)):
        inner = {"epoch": 1, "update": update / 400, "loss": loss, "num_updates": update, "wall": update * 36}
        valid = {"epoch": 1, "valid_loss": loss, "valid_nll_loss": loss - 0.6, "valid_bleu": bleu}
        log += [
            f"| INFO | train_inner | {json.dumps(inner)}",
            f"| INFO | valid | {json.dumps(valid | {'valid_num_updates': update})}",
        ]
    (run_dir / "train.log").write_text("\n".join(log) + "\n")

    capsys.readouterr()
    claims.main([*args, "--report-only"])
    assert f"with preln no warm-up as far as trained: in {tmp_path / 'toy-unfinished.json'}" in capsys.readouterr().out
    markdown = (tmp_path / "toy.md").read_text()
    assert (
        "| preln no warm-up | 300 (training) | 200 | not yet | n/a | 3.0 | not validated | 6.400 / 2.00 |" in markdown
    )
    assert "| preln no warm-up | adam | none | training | 6.400 | 2.00 | 2.00 | 100 |  |" in markdown.splitlines()
    assert "| postln warm-up | adam | 300 | trained | 5.000 | 1.00 |" in markdown
    assert (tmp_path / "toy.json").read_text() == results

    with (run_dir / "train.log").open("a") as f:
        f.write("| INFO | fairseq_cli.train | early stop since valid performance hasn't improved for last 3 runs\n")
    claims.main([*args, "--report-only"])
    markdown = (tmp_path / "toy.md").read_text()
    assert "| preln no warm-up | 300 | 200 | yes |" in markdown
    assert "| preln no warm-up | adam | none | ended, not scored | 6.400 |" in markdown
    assert "Made by:\n\n    python scripts/claims.py toy --updates 400" in markdown  # the finished run's command

    (tmp_path / "toy.json").unlink()  # no run finished yet: no command made anything in the report
    claims.main([*args, "--report-only"])
    markdown = (tmp_path / "toy.md").read_text()
    assert "Made by: no run has finished yet.\n" in markdown and "| preln no warm-up | 300 | 200 | yes |" in markdown
    assert "| postln warm-up |" not in markdown

    unigram = claims.unigram_of(TOY, str(multi30k))  # a run training but stalled so far says so
    stalled = {"epoch": 2, "valid_loss": unigram + 1.6, "valid_nll_loss": unigram + 1, "valid_bleu": 0.1}
    log = log[:-1] + [f"| INFO | valid | {json.dumps(stalled | {'valid_num_updates': 300})}"]
    (run_dir / "train.log").write_text("\n".join(log) + "\n")
    claims.main([*args, "--report-only"])
    assert "| preln no warm-up | adam | none | training (stalled) |" in (tmp_path / "toy.md").read_text()
    (tmp_path / "toy.json").write_text(results)
    (tmp_path / "toy-unfinished.json").unlink()  # below: only what the run directory holds

    optimization = spec["fairseq"]["optimization"]
    other = {**spec, "fairseq": {**spec["fairseq"], "optimization": {**optimization, "lr": [0.5]}}}
    shorter = {**spec, "budget": {**spec["budget"], "updates": 300}}  # a finished run this budget goes on with
    shorter["fairseq"] = {**spec["fairseq"], "optimization": {**optimization, "max_update": 300}}
    for made in (other, shorter):  # another run, not this one training
        (run_dir / "spec.json").write_text(json.dumps(made))
        capsys.readouterr()
        claims.main([*args, "--report-only"])
        assert "as far as trained" not in capsys.readouterr().out
        assert "preln no warm-up" not in (tmp_path / "toy.md").read_text()

    # where it stood outlives the run directory (OUT-unfinished.json), until the run is finished
    (run_dir / "spec.json").write_text(json.dumps(spec))
    claims.main([*args, "--report-only"])
    (kept,) = json.loads((tmp_path / "toy-unfinished.json").read_text())["runs"]
    assert (kept["label"], kept["status"], kept["health"], kept["updates"]) == (
        "preln no warm-up",
        "training",
        "stalled",
        300,
    )
    shutil.rmtree(run_dir)
    claims.main([*args, "--report-only"])
    markdown = (tmp_path / "toy.md").read_text()
    assert "| preln no warm-up | 300 (stopped) | 200 | no |" in markdown
    assert "| preln no warm-up | adam | none | stopped (stalled) |" in markdown and "| postln warm-up |" in markdown
    assert (tmp_path / "toy.json").read_text() == results
    claims.main([*args, "--runs-only", "preln no warm-up"])  # trained again (faked), finished
    claims.main([*args, "--report-only"])
    assert not (tmp_path / "toy-unfinished.json").exists() and "(stopped)" not in (tmp_path / "toy.md").read_text()


def test_claim_report_of_runs_without_the_baseline(tmp_path):
    """A claim run in part (``--runs-only``) without its baseline: the column that counts
    updates to the baseline's BLEU names it and says it was not run, instead of "None"."""
    valid = [{"update": 2, "nll": 5.0, "bleu": 1.0}, {"update": 4, "nll": 4.0, "bleu": 2.5}]
    spec = {"claim": "toy", "fairseq": {"model": {}}}
    run = {"label": "preln no warm-up", "method": "preln", "optimizer": "adam", "warmup": None, "spec": spec}
    run |= {"status": "trained", "valid": valid, "test_bleu": 3.0}
    markdown = render.claim_report("toy", TOY, [run], [], tmp_path / "toy", unigram=8.0).splitlines()
    (header,) = [line for line in markdown if line.startswith("| run |")]
    assert "updates to postln warm-up's valid BLEU |" in header and "None" not in header
    assert "| preln no warm-up | adam | none | trained | 4.000 | 2.50 | 2.50 | n/a (not run) | 3.00 |" in markdown
    baseline = {**run, "label": "postln warm-up", "method": "postln", "warmup": 300}
    markdown = render.claim_report("toy", TOY, [run, baseline], [], tmp_path / "toy", unigram=8.0).splitlines()
    assert any(line.startswith("| run |") and "updates to 2.5 valid BLEU (postln warm-up)" in line for line in markdown)
    assert "| preln no warm-up | adam | none | trained | 4.000 | 2.50 | 2.50 | 4 | 3.00 |" in markdown


def test_precision_report_sets_each_run_beside_its_other_precision(tmp_path):
    """Columns in the order named (the other precision first), the difference this one minus
    that one, runs matched by label in the claim's order, differing settings listed."""

    def record(label, method, precision, nll, bleu, **fp16):
        spec = {"claim": "toy", "budget": {"updates": 4}, "run": {"label": label}}
        spec |= {"precision": precision} if precision != "fp32" else {}
        valid = [{"update": 2, "nll": nll + 1, "bleu": 0.0}, {"update": 4, "nll": nll, "bleu": 1.0}]
        return {
            "label": label,
            "method": method,
            "spec": spec,
            "status": "trained",
            "valid": valid,
            "test_bleu": bleu,
        } | fp16

    scales = {"loss_scale_min": 32.0, "loss_scale_last": 64.0, "loss_scales": [[2, 32.0], [4, 64.0]], "overflows": 2}
    half = [
        record("preln no warm-up", "preln", "fp16", 3.5, 21.0, **scales),
        record("postln warm-up", "postln", "fp16", 4.0, 9.0, **scales),
    ]
    full = [
        record("postln warm-up", "postln", "fp32", 4.25, 10.5),
        record("preln no warm-up", "preln", "fp32", 3.25, 20.0),
    ]
    full[0]["spec"]["fairseq"] = {"clip_norm": 0.0}
    full[1]["spec"]["fairseq"] = {"optimization": {"clip_norm": 0.0}}  # fairseq's default written out: no difference
    markdown = render.precision_report("toy", TOY, half, full, tmp_path / "vs").splitlines()
    rows = [line for line in markdown if line.startswith("| p")]
    assert rows == [
        "| postln warm-up | trained | trained | 4.250 | 4.000 | 10.50 | 9.00 | -1.50 | 32 / 64, 2 overflows |",
        "| preln no warm-up | trained | trained | 3.250 | 3.500 | 20.00 | 21.00 | +1.00 | 32 / 64, 2 overflows |",
    ]
    assert markdown[-1] == "- postln warm-up: fairseq.clip_norm: unset vs 0.0"
    assert (tmp_path / "vs.png").is_file()

    # the other way round (fp32 runs against fp16 ones: the loss scale is still the fp16 run's),
    # and a language model's claim, scored by test perplexity
    lm = claims.CLAIMS["lm"]
    for r in half + full:
        r["label"], r["method"], r["test_ppl"] = ("postln 16L", "postln", r.pop("test_bleu") * 10)
    markdown = render.precision_report("lm", lm, full[:1], half[1:], tmp_path / "lm").splitlines()
    assert "| test ppl fp16 | test ppl fp32 | fp32 − fp16 |" in markdown[4]
    assert (
        markdown[6]
        == "| postln 16L | trained | trained | 4.000 | 4.250 | 90.00 | 105.00 | +15.00 | 32 / 64, 2 overflows |"
    )


def test_spec_differences_name_every_setting_but_the_precision():
    a = {"budget": {"updates": 4, "precision": "fp16"}, "fairseq": {"model": {"bias": "zero"}, "lr": 1}}
    b = {"budget": {"updates": 4}, "fairseq": {"model": {"bias": "fork"}, "clip": 0.0, "lr": 1}}
    assert render.spec_differences(a, b) == ["fairseq.clip: unset vs 0.0", "fairseq.model.bias: zero vs fork"]
    assert render.spec_differences(a, a) == [] and render.spec_differences(a, b, ignore=()) == [
        "budget.precision: fp16 vs unset",
        "fairseq.clip: unset vs 0.0",
        "fairseq.model.bias: zero vs fork",
    ]


@pytest.mark.slow(1)
def test_language_model_claim_end_to_end(tmp_path, monkeypatch):
    """A language-model claim (``corpus="wikitext2"``): decoder-only runs at their own depths on
    WikiText, validated by loss alone, scored by test perplexity, tabled per depth; stalled means
    not below the unigram entropy of the training text."""
    from fairseq_layernorm_plugins.experiments import experiment
    from fairseq_layernorm_plugins.experiments.curves import unigram_bits

    data = tmp_path / "wikitext-2"  # as fairseq-ln-prepare wikitext2 writes it, from the corpus' first lines
    data.mkdir()
    for split, lines in (("train", 400), ("valid", 40), ("test", 40)):
        text = (shared_data("wikitext2") / f"wiki.{split}.tokens").read_text(encoding="utf-8").splitlines()[:lines]
        (data / f"{split}.tokens").write_text("\n".join(text) + "\n", encoding="utf-8")
    prefixes = [arg for split in ("train", "valid", "test") for arg in (f"--{split}pref", data / f"{split}.tokens")]
    run_cli("fairseq-preprocess", "--only-source", *prefixes, "--destdir", data / "bin", "--workers", "1")
    monkeypatch.setattr(experiment, "prepare_corpus", lambda *a, **k: None)  # the corpus above
    small_vocab = {"adaptive_input_cutoff": "200,1000", "adaptive_softmax_cutoff": "200,1000"}  # its few words
    runs = (
        Run("postln 1L", "postln", warmup=300, depth="1L"),
        Run("b2t 2L", "b2t", warmup=300, depth="2L"),
    )
    toy = Claim(
        **{
            **TOY.__dict__,
            "depth": "1L",
            "runs": runs,
            "baseline": "postln 1L",
            "corpus": "wikitext2",
            "model": small_vocab,
        }
    )
    monkeypatch.setitem(claims.CLAIMS, "toy", toy)
    args = ["toy", "--updates", "4", "--validate-every", "2", "--max-tokens", "512"]
    claims.main([*args, "--data-dir", str(data), "--runs", str(tmp_path / "runs")])
    out = tmp_path / "runs" / "toy"
    records = {r["label"]: r for r in json.loads(out.with_suffix(".json").read_text())["runs"]}
    unigram = unigram_bits(data, "tokens")
    for label, layers in (("postln 1L", 1), ("b2t 2L", 2)):
        record = records[label]
        model = record["spec"]["fairseq"]["model"]
        assert model["decoder_layers"] == layers and not any(key.startswith("encoder") for key in model)
        assert record["spec"]["fairseq"]["optimizer"]["weight_decay"] == 0.0
        assert [v["update"] for v in record["valid"]] == [2, 4] and all(v["bleu"] is None for v in record["valid"])
        assert all(v["ppl"] == pytest.approx(2 ** v["nll"]) for v in record["valid"])
        assert record["status"] == ("stalled" if record["valid"][-1]["nll"] >= unigram else "trained")
        scored = json.loads((out / label.replace(" ", "_") / "results.json").read_text())
        assert record["test_ppl"] == scored["perplexity"]["test"]["score"] > 1
    markdown = out.with_suffix(".md").read_text()
    assert "| postln 1L | 1L |" in markdown and "| b2t 2L | 2L |" in markdown and "WikiText-2" in markdown
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_budget_without_patience_is_the_earlier_budget():
    """Results made before ``--patience`` existed keep their budget (OUT.json's is compared)."""
    args = argparse.Namespace(updates=2000, validate_every=200, max_tokens=2048, seed=1, patience=0)
    assert claims.budget(args) == {"updates": 2000, "validate_every": 200, "max_tokens": 2048, "seed": 1}
    assert claims.budget(argparse.Namespace(**{**vars(args), "patience": 5}))["patience"] == 5


def seed_record(label, method, test_bleu, nll):
    return {"label": label, "method": method, "test_bleu": test_bleu, "valid": [{"update": 4, "nll": nll, "bleu": 1.0}]}


def test_seeds_are_compared_run_by_run_and_paired_by_seed(tmp_path, monkeypatch):
    monkeypatch.setitem(claims.CLAIMS, "toy", TOY)
    first = tmp_path / "toy"
    args = argparse.Namespace(claim="toy", seed=3, runs=str(tmp_path), init_style=None)
    assert claims.claim_dir(args) == tmp_path / "toy-seed3" and claims.claim_dir(args, seed=1) == first
    assert claims.seed_path(first, 1) == first and claims.seed_path(first, 3) == tmp_path / "toy-seed3"

    def results(name, seed, *runs):
        (tmp_path / f"{name}.json").write_text(json.dumps({"budget": {"seed": seed}, "runs": list(runs)}))

    results(
        "toy",
        1,
        seed_record("postln warm-up", "postln", 27.0, 4.0),
        seed_record("preln no warm-up", "preln", 30.0, 3.5),
    )
    assert render.claim_seeds_report("toy", TOY, first) is None and not (tmp_path / "toy-seeds.md").exists()  # one seed
    results(
        "toy-seed2",
        2,
        seed_record("postln warm-up", "postln", 28.0, 4.0),
        seed_record("preln no warm-up", "preln", 31.0, 3.0),
    )
    results(
        "toy-seed3",
        3,
        seed_record("postln warm-up", "postln", 29.0, 4.0),
        seed_record("preln no warm-up", "preln", 29.0, 4.0),
    )
    results(
        "toy-init-paper", 7, seed_record("preln no warm-up", "preln", 0.0, 9.0)
    )  # another claim directory: not a seed
    markdown = render.claim_seeds_report("toy", TOY, first)
    assert markdown == (tmp_path / "toy-seeds.md").read_text().rstrip("\n")
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in markdown.splitlines() if line.startswith("| p")}
    assert rows["postln warm-up"] == [
        "1, 2, 3",
        "27.00, 28.00, 29.00",
        "28.00 ± 1.00",
        "4.000 ± 0.000",
        "1.00 ± 0.00",
        "",
        "",
        " |",
    ]
    # preln minus postln, paired by seed: test BLEU +3, +3, 0; valid NLL -0.5, -1, 0
    assert rows["preln no warm-up"][:2] == ["1, 2, 3", "30.00, 31.00, 29.00"]
    assert rows["preln no warm-up"][3] == "3.500 ± 0.500"
    assert rows["preln no warm-up"][5:] == ["+3.00, +3.00, +0.00", "+2.00 ± 1.73", "-0.500 ± 0.500 |"]
    assert "| final valid NLL |" in markdown and "valid NLL − postln warm-up |" in markdown
    assert (tmp_path / "toy-seeds.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Against" not in markdown  # no other run to pair against
    # paired against another run as well: postln minus preln, the first table's differences negated
    other = dataclasses.replace(TOY, also_against=("preln no warm-up",))
    against = render.claim_seeds_report("toy", other, first).split("Against preln no warm-up")[1].splitlines()
    assert against[4] == "| postln warm-up | 1, 2, 3 | -3.00, -3.00, +0.00 | -2.00 ± 1.73 | +0.500 ± 0.500 |"
    assert len(against) == 5  # one row: a run is not paired with itself
    with pytest.raises(ValueError, match="no run labelled 'absent run'"):  # a misspelt label is refused, not skipped
        dataclasses.replace(TOY, also_against=("preln no warm-up", "absent run"))

    # trained to convergence: each run is scored by its best checkpoint, not its last validation
    for name, seed, nll in (("toy", 1, 3.5), ("toy-seed2", 2, 3.0), ("toy-seed3", 3, 4.0)):
        converged = seed_record("preln no warm-up", "preln", 30.0, nll)
        converged["valid"] += [{"update": 6, "nll": nll + 0.25, "bleu": 0.5}]  # past its best
        five = [f"checkpoint_{u}.pt" for u in range(5)]
        converged |= {"best_update": 4, "stopped_early": True, "test_bleu_averaged": 30.0 + seed, "averaged": five}
        baseline = seed_record("postln warm-up", "postln", 28.0, 4.0) | {"best_update": 4, "stopped_early": True}
        baseline |= {"test_bleu_averaged": 29.0 - seed, "averaged": five}  # averaged minus baseline: +3, +5, +7
        converged |= {"updates": 6, "train_hours": 0.25 * seed}
        baseline |= {"updates": 4 + seed, "train_hours": 1.04}
        if seed == 2:  # validated at the fixed budget's update
            converged["valid"].insert(0, {"update": claims.UPDATES, "nll": 5.0, "bleu": 2.5})
        results(name, seed, *([baseline, converged] if seed < 3 else [converged]))
    markdown = render.claim_seeds_report("toy", TOY, first)
    by_seed = markdown.split("Every run by seed")[1].splitlines()[4:]
    assert by_seed == [  # grouped by run in the claim's order; a seed without the run has no row
        "| postln warm-up | 1 | 5 | 4 | 1.0 | not validated | 4.000 / 1.00 | 28.00 | 28.00 (5) |",
        "| postln warm-up | 2 | 6 | 4 | 1.0 | not validated | 4.000 / 1.00 | 28.00 | 27.00 (5) |",
        "| preln no warm-up | 1 | 6 | 4 | 0.2 | not validated | 3.500 / 1.00 | 30.00 | 31.00 (5) |",
        "| preln no warm-up | 2 | 6 | 4 | 0.5 | 5.000 / 2.50 | 3.000 / 1.00 | 30.00 | 32.00 (5) |",
        "| preln no warm-up | 3 | 6 | 4 | 0.8 | not validated | 4.000 / 1.00 | 30.00 | 33.00 (5) |",
    ]
    results("toy-seed3", 3, baseline, converged)
    markdown = render.claim_seeds_report("toy", TOY, first).split("Every run by seed")[0]
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in markdown.splitlines() if line.startswith("| p")}
    assert "| best-checkpoint valid NLL | best-checkpoint valid BLEU |" in markdown
    assert rows["preln no warm-up"][3:5] == ["3.500 ± 0.500", "1.00 ± 0.00"]
    assert rows["preln no warm-up"][-3:] == ["-0.500 ± 0.500", "32.00 ± 1.00", "+5.00 ± 2.00 |"]
    assert rows["postln warm-up"][-2:] == ["27.00 ± 1.00", " |"]
    baseline["averaged"] = five[:2]  # a mean of fewer checkpoints (seed 3's baseline) is not paired with the others
    results("toy-seed3", 3, baseline, converged)
    assert "averaged test BLEU" not in render.claim_seeds_report("toy", TOY, first)


def test_init_style_option_overrides_the_claims_initialisation_and_has_its_own_run_directory(tmp_path):
    """The claim's own model options reach every run; --init-style replaces its init_style only."""
    claim = Claim(**{**TOY.__dict__, "model": {"init_style": "fairseq", "dropout": 0.2}})
    args = argparse.Namespace(
        claim="toy",
        updates=4,
        validate_every=2,
        max_tokens=2048,
        seed=1,
        patience=0,
        runs=str(tmp_path),
        init_style=None,
    )
    for init_style, directory in ((None, "toy"), ("paper", "toy-init-paper")):
        args.init_style = init_style
        for run in claim.runs:
            spec = claims.run_spec(claim, run, args)[1]
            assert spec["fairseq"]["model"]["init_style"] == (init_style or "fairseq")
            assert spec["fairseq"]["model"]["dropout"] == 0.2
            assert "precision" not in spec  # fp32 runs' specs as before --precision existed
        assert claims.claim_dir(args) == tmp_path / directory
    args.precision = "bf16"
    assert claims.run_spec(claim, claim.runs[0], args)[1]["precision"] == "bf16"
    assert claims.claim_dir(args) == tmp_path / "toy-init-paper-bf16"
