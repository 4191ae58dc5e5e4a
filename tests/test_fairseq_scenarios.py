"""fairseq's own scenarios for its ``transformer`` (tests/test_binaries.py,
test_reproducibility.py, test_checkpoint_utils.py, test_inference_dropout.py), told again in
this project's words and run for every method the plugin registers: the registry
(``ARCH_FAMILIES``, fairseq's ``ARCH_MODEL_REGISTRY``) decides which, so a new method is
covered by registering it. A fast subset: tiny models, fairseq-train in this process (as
fairseq's own tests run it), a few epochs of the toy reversal task.
"""

import argparse
import logging
import shutil
import time

import pytest
import torch
from conftest import PLUGIN_DIR, TINY_MODEL, batch, build, parse, plugin_archs, run_cli
from fairseq import checkpoint_utils, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models import MODEL_REGISTRY
from fairseq.modules import FairseqDropout
from helpers.in_process import captured_logs

from fairseq_layernorm_plugins.models.base import ARCH_FAMILIES, PluginTransformerModel

ARCHS = plugin_archs()  # every registered architecture: {arch: model name}
FAMILIES = sorted(ARCH_FAMILIES)  # one per method; its base architecture has the model's name

# fairseq's tests/test_binaries.py trains with these (train_translation_model)
FAIRSEQ_TEST_TRAINING = ["--optimizer", "nag", "--lr", "0.05", "--max-tokens", "500", "--num-workers", "0"]


def test_every_registered_arch_is_covered():
    """Each scenario here is an encoder-decoder one, the language models' are in
    test_language_models.py, the speech models' in test_speech_models.py: every plugin arch is
    one of the three kinds."""
    assert set(ARCHS.values()) <= set(FAMILIES), "a plugin model registered without register_arch_family"
    kinds = set(ARCHS) | set(plugin_archs("lm")) | set(plugin_archs("s2t"))
    assert set(plugin_archs("all")) == kinds, "a plugin model of another kind"
    assert all(issubclass(MODEL_REGISTRY[model], PluginTransformerModel) for model in ARCHS.values())


def train(data_bin, save_dir, arch, *flags):
    """One ``fairseq-train`` run in this process (``fairseq_cli.train.main``, as fairseq's
    tests run it) of a tiny ``arch``; returns its json logs (``helpers.in_process.JsonRecords``)."""
    from fairseq import options
    from fairseq_cli import train as fairseq_train

    argv = [str(data_bin), "--arch", arch, "--user-dir", str(PLUGIN_DIR), *TINY_MODEL, *FAIRSEQ_TEST_TRAINING]
    argv += ["--cpu", "--no-progress-bar", "--log-format", "json", "--log-interval", "1", "--save-dir", str(save_dir)]
    args = options.parse_args_and_arch(options.get_training_parser(), argv + [str(f) for f in flags])
    with captured_logs() as logs:
        fairseq_train.main(args)
    return logs


def bare_args(model_cls, *flags):
    """Args as fairseq's own tests and a notebook make them (tests/test_export.py,
    test_inference_dropout.py): the model's own options on a parser that leaves out what is
    not given; no architecture function has run."""
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    model_cls.add_args(parser)
    return parser.parse_args([str(f) for f in flags])


def signature(model):
    """Per module, in order: its name, class and plain settings (normalize_before, DeepNet's
    alpha, dropout p and module name, ...)."""
    plain = (bool, int, float, str)
    return [
        (name, type(m).__name__, {k: v for k, v in vars(m).items() if isinstance(v, plain) and not k.startswith("_")})
        for name, m in model.named_modules()
    ]


def assert_same_model(ours, reference):
    assert signature(ours) == signature(reference)
    theirs = reference.state_dict()
    for key, value in ours.state_dict().items():
        torch.testing.assert_close(value, theirs[key], rtol=0, atol=0, msg=key)


@pytest.fixture(scope="module")
def translation_task(tiny_data_bin):
    return tasks.setup_task(parse(tiny_data_bin, "transformer", *TINY_MODEL))


# --- building a model from bare args (fairseq's TransformerModel.build_model fills in its defaults)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_bare_args_naming_an_arch_build_that_arch(tiny_data_bin, translation_task, arch):
    """``Model.build_model(args, task)`` with bare args and ``args.arch`` builds the model the
    command line ``--arch`` builds: the same modules, settings and initial parameters."""
    reference, _, _ = build(tiny_data_bin, arch, *TINY_MODEL, seed=1)
    model_cls = MODEL_REGISTRY[ARCHS[arch]]
    args = bare_args(model_cls, *TINY_MODEL)
    args.arch = arch
    torch.manual_seed(1)
    assert_same_model(model_cls.build_model(args, translation_task), reference)


@pytest.mark.parametrize("family", FAMILIES)
def test_bare_args_build_the_methods_base_model(tiny_data_bin, translation_task, family):
    """Without ``args.arch`` (fairseq's own tests): the method's base architecture, e.g. a
    Pre-LN model with its final LayerNorms, not fairseq's Post-LN transformer."""
    reference, _, _ = build(tiny_data_bin, family, *TINY_MODEL, seed=1)
    torch.manual_seed(1)
    model = MODEL_REGISTRY[family].build_model(bare_args(MODEL_REGISTRY[family], *TINY_MODEL), translation_task)
    assert_same_model(model, reference)


# --- resuming (tests/test_reproducibility.py): a run resumed from a checkpoint ends as the uninterrupted one

# fairseq's test trains with dropout 0; dropout on also checks that a resumed run draws the same masks.
# An epoch is about 20 updates: checkpoint_2_25.pt is one saved in the middle of epoch 2
# (test_mid_epoch_reproducibility resumes in epoch 1, where every run makes its batches alike)
RESUME_FLAGS = ["--max-epoch", "3", "--dropout", "0.1", "--save-interval-updates", "25"]
FAIRSEQ_COMPARED = {
    "train": ["train_loss", "train_ppl", "train_num_updates", "train_gnorm"],
    "valid": ["valid_loss", "valid_ppl", "valid_num_updates", "valid_best_loss"],
}


@pytest.fixture(scope="module")
def three_epochs(tiny_data_bin, tmp_path_factory):
    """family -> (save dir, json logs) of an uninterrupted 3-epoch run, made once."""
    runs = {}

    def run(family):
        if family not in runs:
            save_dir = tmp_path_factory.mktemp(f"{family}-3-epochs")
            runs[family] = save_dir, train(tiny_data_bin, save_dir, family, *RESUME_FLAGS)
        return runs[family]

    return run


def model_state(path):
    return torch.load(path, map_location="cpu", weights_only=False)["model"]


def inner_steps(records):
    return [(int(r["num_updates"]), r["loss"], r["gnorm"]) for r in records]


@pytest.mark.parametrize("checkpoint", ["checkpoint1.pt", "checkpoint_2_*.pt"])
@pytest.mark.parametrize("family", FAMILIES)
def test_resumed_run_reproduces_the_uninterrupted_one(tiny_data_bin, three_epochs, tmp_path, family, checkpoint):
    """A run resumed after epoch 1 or in the middle of epoch 2 trains on the same batches with
    the same dropout masks as the uninterrupted run (fairseq main cuts a resumed run's batches
    anew: ``resume_batches`` in _compat.py), so it logs the same steps and ends identical."""
    save_dir, logs = three_epochs(family)
    (path,) = save_dir.glob(checkpoint)
    shutil.copy(path, tmp_path / "checkpoint_last.pt")  # what a requeued job finds
    resumed = train(tiny_data_bin, tmp_path, family, *RESUME_FLAGS)
    for kind, keys in FAIRSEQ_COMPARED.items():  # fairseq's test: the last epoch's stats, to 1e-4
        for key in keys:
            assert float(resumed.of(kind)[-1][key]) == pytest.approx(float(logs.of(kind)[-1][key]), abs=1e-4), key
    # stricter: every update after the resume point, and the final parameters
    steps = inner_steps(resumed.of("train_inner"))
    assert len(steps) >= 30 and steps == inner_steps(logs.of("train_inner")[-len(steps) :])
    final, resumed_final = model_state(save_dir / "checkpoint_last.pt"), model_state(tmp_path / "checkpoint_last.pt")
    for key, value in final.items():
        torch.testing.assert_close(resumed_final[key], value, rtol=0, atol=0, msg=key)


# --patience 3 with the loss "maximized": every validation after the first is no better, so a
# run validated every 2 updates stops at update 8 (best at 2; 4, 6, 8 without improvement)
PATIENCE_FLAGS = ["--patience", "3", "--maximize-best-checkpoint-metric", "--max-update", "40"]
PATIENCE_FLAGS += ["--validate-interval-updates", "2", "--save-interval-updates", "2", "--no-epoch-checkpoints"]


def fresh_early_stopping():
    """What a new fairseq-train process starts with: ``should_stop_early`` keeps its state in
    function attributes, which outlive a run in this process."""
    from fairseq_cli.train import should_stop_early

    for name in ("best", "num_runs"):
        vars(should_stop_early).pop(name, None)


def test_resumed_run_stops_early_where_the_uninterrupted_one_does(tiny_data_bin, tmp_path):
    """``--patience``'s best loss and count survive a resume (``patience_resume`` in
    _compat.py): resumed after the second validation without improvement, the run stops after
    one more, at the update the uninterrupted run stops at (fairseq alone: 6 updates later)."""
    fresh_early_stopping()
    uninterrupted = train(tiny_data_bin, tmp_path / "whole", "transformer_postln", *PATIENCE_FLAGS)
    assert uninterrupted.of("train_inner")[-1]["num_updates"] == "8"
    assert any("early stop" in line for line in uninterrupted.lines)
    shutil.copy(tmp_path / "whole" / "checkpoint_1_6.pt", tmp_path / "checkpoint_last.pt")
    fresh_early_stopping()
    resumed = train(tiny_data_bin, tmp_path, "transformer_postln", *PATIENCE_FLAGS)
    assert [r["num_updates"] for r in resumed.of("train_inner")] == ["7", "8"]
    assert any("early stop" in line for line in resumed.lines)


def checkpoint_updates(path):
    return torch.load(path, map_location="cpu", weights_only=False)["optimizer_history"][-1]["num_updates"]


@pytest.mark.parametrize("stop", ["max-update", "patience"])
def test_run_resumed_finished_trains_no_further(tiny_data_bin, tmp_path, stop):
    """The same command again in a finished run's directory (a requeued job) leaves its model
    as it was (``resume_finished`` in _compat.py); fairseq alone trains one more update past
    ``--max-update``, or on to the next validation once ``--patience`` is spent."""
    flags = ["--max-update", "4"] if stop == "max-update" else PATIENCE_FLAGS
    fresh_early_stopping()
    first = train(tiny_data_bin, tmp_path, "transformer_postln", *flags)
    last = first.of("train_inner")[-1]["num_updates"]
    assert last == ("4" if stop == "max-update" else "8")
    before = model_state(tmp_path / "checkpoint_last.pt")
    fresh_early_stopping()  # a new process
    again = train(tiny_data_bin, tmp_path, "transformer_postln", *flags)
    assert again.of("train_inner") == [] and any("resumed finished" in line for line in again.lines)
    assert checkpoint_updates(tmp_path / "checkpoint_last.pt") == int(last)
    for key, value in model_state(tmp_path / "checkpoint_last.pt").items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0, msg=key)


def test_resumed_run_logs_the_wall_clock_of_the_saved_one(tiny_data_bin, tmp_path):
    """fairseq's ``wall`` (seconds since the run began) goes on from the checkpoint's
    (``wall_resume`` in _compat.py); fairseq alone logs 0 after every resume. The saved
    seconds are set to an hour, so the resumed run must log an hour plus its own time."""
    first = train(tiny_data_bin, tmp_path / "first", "transformer_postln", "--max-update", "4")
    state = torch.load(tmp_path / "first" / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    logged = [float(r["wall"]) for r in first.of("train_inner")]
    assert logged == sorted(logged) and state["extra_state"]["wall"] >= logged[-1] - 0.5  # logs round to 1 s
    state["extra_state"]["wall"] = 3600.0
    torch.save(state, tmp_path / "checkpoint_last.pt")
    start = time.perf_counter()
    resumed = train(tiny_data_bin, tmp_path, "transformer_postln", "--max-update", "8")
    took = time.perf_counter() - start
    walls = [float(r["wall"]) for r in resumed.of("train_inner")]
    assert [r["num_updates"] for r in resumed.of("train_inner")] == ["5", "6", "7", "8"]
    assert all(3600 <= wall <= 3600 + took + 0.5 for wall in walls), walls
    saved = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)["extra_state"]["wall"]
    assert 3600 + took >= saved >= walls[-1] - 0.5


# --- checkpoint_utils (tests/test_checkpoint_utils.py) and generation (tests/test_binaries.py)


def generate(models, cfg, task, sample):
    generator = task.build_generator(models, cfg.generation)
    hypos = task.inference_step(generator, models, sample)
    assert len(hypos) == sample["nsentences"] and all(h[0]["tokens"].numel() > 0 for h in hypos)
    return hypos


@pytest.mark.parametrize("family", FAMILIES)
def test_checkpoint_loads_back_the_trained_model(three_epochs, family):
    """``load_model_ensemble_and_task`` on a trained checkpoint: the method's model class with
    the trained parameters as saved (Admin's omega not profiled again), translating."""
    save_dir, _ = three_epochs(family)
    path = save_dir / "checkpoint_last.pt"
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(path)])
    (model,) = models
    assert type(model) is MODEL_REGISTRY[family] and cfg.model.arch == family
    saved = model_state(path)
    assert model.state_dict().keys() == saved.keys()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, saved[key], rtol=0, atol=0, msg=key)
    model.eval()
    sample = batch(task)
    first, again = (model(**sample["net_input"])[0] for _ in range(2))
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    generate(models, cfg, task, sample)


# --- LayerDrop (tests/test_binaries.py: train with LayerDrop, generate from a pruned model)


@pytest.mark.parametrize("family", FAMILIES)
def test_layerdrop_training_and_pruned_generation(tiny_data_bin, tmp_path, family):
    flags = ["--encoder-layers", 3, "--decoder-layers", 3, "--encoder-layerdrop", 0.3, "--decoder-layerdrop", 0.3]
    if MODEL_REGISTRY[family].forbidden_flags().get("encoder_layerdrop"):  # a method that needs every layer
        with pytest.raises(ValueError, match="drop --encoder-layerdrop"):
            build(tiny_data_bin, family, *TINY_MODEL, *flags)
        return
    logs = train(tiny_data_bin, tmp_path, family, *flags, "--max-update", 6, "--dropout", 0.1)
    assert int(logs.of("train")[-1]["train_num_updates"]) == 6
    keep = {"encoder_layers_to_keep": "0,2", "decoder_layers_to_keep": "1"}
    try:
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            [str(tmp_path / "checkpoint_last.pt")], arg_overrides=keep
        )
    except ValueError as err:  # a method may refuse pruning, naming the option
        assert "layers_to_keep" in str(err)
        return
    (model,) = models
    assert (len(model.encoder.layers), len(model.decoder.layers)) == (2, 1)
    saved = model_state(tmp_path / "checkpoint_last.pt")
    kept = {"encoder.layers.1.": "encoder.layers.2.", "decoder.layers.0.": "decoder.layers.1."}
    for key, value in model.state_dict().items():
        for new, old in kept.items():
            if key.startswith(new):
                torch.testing.assert_close(value, saved[old + key[len(new) :]], rtol=0, atol=0, msg=key)
    model.eval()
    generate(models, cfg, task, batch(task))


# --- inference dropout (tests/test_inference_dropout.py)


def retained(model):
    return {name for name, m in model.named_modules() if isinstance(m, FairseqDropout) and m.apply_during_inference}


RETAIN_DROPOUT_MODULES = (None, ("TransformerEncoder", "TransformerEncoderLayerBase"))


def prepared_for_inference(model_cls, task, modules):
    """``model_cls`` built from bare args with dropout, then ``--retain-dropout`` (and
    ``--retain-dropout-modules``) applied as fairseq's generation does (``prepare_for_inference_``)."""
    args = bare_args(model_cls, *TINY_MODEL, "--dropout", 0.3)
    args.retain_dropout, args.retain_dropout_modules = True, None if modules is None else list(modules)
    model = model_cls.build_model(args, task)
    model.prepare_for_inference_(convert_namespace_to_omegaconf(args))
    assert not model.training
    return model


@pytest.fixture(scope="module")
def stock_retained(translation_task):
    """--retain-dropout-modules -> the dropout modules fairseq's own transformer keeps on (the
    same for every family: made once)."""
    from fairseq.models.transformer import TransformerModel

    return {m: retained(prepared_for_inference(TransformerModel, translation_task, m)) for m in RETAIN_DROPOUT_MODULES}


@pytest.mark.parametrize("family", FAMILIES)
def test_retain_dropout_as_fairseqs_transformer(translation_task, stock_retained, family):
    """``--retain-dropout`` (``prepare_for_inference_``) keeps the same dropout modules on in
    eval mode as for fairseq's transformer built from the same bare args: all of them, or
    those ``--retain-dropout-modules`` names."""
    models = {m: prepared_for_inference(MODEL_REGISTRY[family], translation_task, m) for m in RETAIN_DROPOUT_MODULES}
    for modules, ours in models.items():
        assert retained(ours) == stock_retained[modules] and retained(ours)
    ours = models[None]  # every dropout module on in eval mode
    src = batch(translation_task)["net_input"]
    with torch.no_grad():
        first, again = (ours(**src)[0] for _ in range(2))
    assert not torch.allclose(first, again), "dropout is off in eval mode"


# --- activation checkpointing (tests/test_binaries.py: --checkpoint-activations changes no metric)


@pytest.mark.parametrize("family", FAMILIES)
def test_activation_checkpointing_changes_nothing(tiny_data_bin, family):
    """The same initial model, and the same loss and gradients with dropout on (a
    checkpointed layer runs its forward twice: the same masks, the same sub-layer count); a
    method that cannot be checkpointed refuses the flag in one line."""
    why = MODEL_REGISTRY[family].forbidden_flags().get("checkpoint_activations")
    if why:
        with pytest.raises(ValueError, match="drop --checkpoint-activations"):
            build(tiny_data_bin, family, *TINY_MODEL, "--checkpoint-activations")
        return
    runs = []
    for flags in ([], ["--checkpoint-activations"]):
        model, task, _ = build(tiny_data_bin, family, *TINY_MODEL, "--dropout", 0.2, *flags, seed=1)
        sample = batch(task)
        model.train()
        torch.manual_seed(3)
        logits = model(**sample["net_input"])[0]
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), sample["target"].flatten())
        loss.backward()
        runs.append((model, loss))
    (plain, plain_loss), (checkpointed, checkpointed_loss) = runs
    assert any(hasattr(layer, "precheckpoint_forward") for layer in checkpointed.encoder.layers)
    torch.testing.assert_close(checkpointed_loss, plain_loss, rtol=0, atol=0)
    grads = dict(plain.named_parameters())
    for name, p in checkpointed.named_parameters():
        torch.testing.assert_close(p.grad, grads[name].grad, rtol=1e-6, atol=1e-7, msg=name)


# --- multilingual training (tests/test_binaries.py: --task translation_multi_simple_epoch)


@pytest.fixture(scope="module")
def joined_data_bin(tmp_path_factory, tiny_data_bin):
    """The toy task binarised with one dictionary, which translation_multi_simple_epoch needs."""
    raw, destdir = tiny_data_bin.parent, tmp_path_factory.mktemp("joined") / "bin"
    splits = [a for split in ("train", "valid", "test") for a in (f"--{split}pref", raw / split)]
    run_cli(
        "fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt", *splits,
        "--joined-dictionary", "--destdir", destdir, "--workers", "1", in_process=True,
    )  # fmt: skip
    return destdir


@pytest.mark.parametrize("family", FAMILIES)
def test_multilingual_task_trains(joined_data_bin, tmp_path, family, caplog):
    """fairseq's translation_multi_simple_epoch scenario (language tokens, temperature
    sampling, two epochs). Admin profiles its batches without leaving the training split
    loaded in the task, whose load_dataset fails on a split found loaded (fairseq's
    UnboundLocalError on ``shard_epoch``)."""
    multilingual = ["--task", "translation_multi_simple_epoch", "--lang-pairs", "src-tgt"]
    multilingual += ["--sampling-method", "temperature", "--sampling-temperature", "1.5"]
    multilingual += ["--encoder-langtok", "src", "--decoder-langtok"]
    with caplog.at_level(logging.INFO, logger="fairseq_layernorm_plugins.admin_profiling"):
        logs = train(joined_data_bin, tmp_path, family, *multilingual, "--max-epoch", 2)
    assert [int(r["epoch"]) for r in logs.of("train")] == [1, 2] and int(logs.of("train")[-1]["train_num_updates"]) > 20
    assert float(logs.of("valid")[-1]["valid_loss"]) < float(logs.of("valid")[0]["valid_loss"])
    profiled = "Admin: profiled 1 batch(es)" in caplog.text
    assert profiled == hasattr(MODEL_REGISTRY[family], "admin_layers")  # Admin's default --admin-init profile
