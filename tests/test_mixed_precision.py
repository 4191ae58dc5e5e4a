"""fairseq's own fp16 and bf16 training paths on a CPU (``_compat.fp16_on_cpu``,
``_compat.bf16_without_tpu``, ``_compat.fp16_cpu_products``), for every method the package registers, each run through
fairseq-train's own entry point in this process (``helpers/in_process.py``)."""

import json
import math
import statistics

import pytest
import torch
from conftest import PLUGIN_DIR, TINY_MODEL, run_cli
from helpers.in_process import fairseq_train

from fairseq_layernorm_plugins import cpu_fp16
from fairseq_layernorm_plugins.models.base import ARCH_FAMILIES

# every registered method at its base size, and B2T without its LayerNorms beside B2T
VARIANTS = [(model, ()) for model in ARCH_FAMILIES] + [("transformer_b2t", ("--b2t-no-layer-norm",))]
PRECISIONS = {"fp16": torch.float16, "bf16": torch.bfloat16}
UPDATES = 24


def falling(losses):
    quarter = max(1, len(losses) // 4)
    return statistics.mean(losses[-quarter:]) < statistics.mean(losses[:quarter])


def floating_dtypes(model):
    return {t.dtype for t in model.state_dict().values() if t.is_floating_point()}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("arch, extra", VARIANTS, ids=[a + "".join(e) for a, e in VARIANTS])
def test_every_method_trains_in_half_precision_on_cpu(arch, extra, precision, tiny_data_bin, tmp_path):
    """The user's flags alone (``--cpu --fp16`` / ``--cpu --bf16``): fairseq's flat fp32
    master copy, its dynamic loss scale (fp16) or none (bf16), the model itself in half."""
    logs = fairseq_train(tiny_data_bin, tmp_path, arch, *extra, f"--{precision}", updates=UPDATES)
    inner = logs.of("train_inner")
    losses = [float(r["loss"]) for r in inner]
    assert len(losses) == UPDATES
    assert all(math.isfinite(x) for x in losses) and falling(losses), losses
    scales = [float(r["loss_scale"]) for r in inner if "loss_scale" in r]
    if precision == "fp16":
        assert len(scales) == UPDATES and min(scales) >= 1, scales  # logged every update, not collapsed
    else:
        assert scales == []  # fairseq's bf16 path has no loss scaling
    assert floating_dtypes(logs.model) == {PRECISIONS[precision]}  # fairseq saves checkpoints in fp32


def losses(logs):
    return [float(r["loss"]) for r in logs.of("train_inner")]


def test_the_other_fp16_optimizers_train_on_cpu(tiny_data_bin, tmp_path):
    """Per-parameter fp32 masters (``--fp16-no-flatten-grads``) give the flat copy's losses
    exactly (the same arithmetic); ``--memory-efficient-fp16`` (no fp32 masters: each
    update is rounded to fp16) stays within rounding of them over 8 updates."""
    run = lambda name, *flags: fairseq_train(  # noqa: E731
        tiny_data_bin, tmp_path / name, "transformer_preln", "--fp16", *flags, updates=8
    )
    flat = losses(run("flat"))
    assert losses(run("per-parameter", "--fp16-no-flatten-grads")) == flat
    assert losses(run("memory-efficient", "--memory-efficient-fp16")) == pytest.approx(flat, abs=0.02)


def test_a_gradient_overflow_is_skipped_on_cpu(tiny_data_bin, tmp_path):
    """fairseq's overflow branch (lower the scale, skip the update) runs on a CPU: a loss
    scale of 2**30 overflows fp16 at once, and halves until the gradients fit."""
    logs = fairseq_train(tiny_data_bin, tmp_path, "transformer_postln", "--fp16", "--fp16-init-scale", 2**30, updates=4)
    overflows = [line for line in logs.lines if "gradient overflow detected" in line]
    assert overflows, "no overflow at a loss scale of 2**30"
    scales = [float(r["loss_scale"]) for r in logs.of("train_inner")]
    assert len(scales) == 4 and scales[0] == 2.0 ** (30 - len(overflows))  # one halving per skipped update


def test_resumed_fp16_run_continues_with_its_loss_scale_and_omegas(tiny_data_bin, tmp_path):
    """Admin in fp16, 12 updates at once or 6 + 6 from ``checkpoint_last.pt``: the resumed
    run starts from the saved loss scale (changed by then: window 2) and the trained omegas
    (not profiled again). Its first update's loss is the uninterrupted run's; later ones
    stay within rounding of them: fairseq saves the fp16 model, not the fp32 master copy,
    so a resumed fp16 run steps from fp16-rounded masters (stock ``transformer`` alike;
    docs/mixed_precision.md)."""
    flags = ("--fp16", "--fp16-init-scale", 4, "--fp16-scale-window", 2, "--admin-profile-json")
    whole = fairseq_train(
        tiny_data_bin, tmp_path / "whole", "transformer_admin", *flags, tmp_path / "w.json", updates=12
    )
    fairseq_train(tiny_data_bin, tmp_path / "split", "transformer_admin", *flags, tmp_path / "s.json", updates=6)
    first = torch.load(tmp_path / "split" / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    saved_scale = first["last_optimizer_state"]["loss_scale"]
    saved_omega = {k: v.clone() for k, v in first["model"].items() if k.endswith(".omega")}
    (tmp_path / "s.json").unlink()
    resumed = fairseq_train(
        tiny_data_bin, tmp_path / "split", "transformer_admin", *flags, tmp_path / "s.json", updates=12
    )
    assert not (tmp_path / "s.json").exists()  # omega came from the checkpoint, not a new profile
    inner = {int(r["num_updates"]): r for r in whole.of("train_inner")}
    after = resumed.of("train_inner")
    assert [int(r["num_updates"]) for r in after] == list(range(7, 13))
    assert saved_scale > 4 and float(inner[6]["loss_scale"]) == saved_scale  # the scale grew and was saved
    assert [r["loss_scale"] for r in after] == [inner[int(r["num_updates"])]["loss_scale"] for r in after]
    uninterrupted = [float(inner[int(r["num_updates"])]["loss"]) for r in after]
    assert float(after[0]["loss"]) == uninterrupted[0]
    assert [float(r["loss"]) for r in after] == pytest.approx(uninterrupted, abs=0.02)
    resumed_model = torch.load(tmp_path / "split" / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    whole_model = torch.load(tmp_path / "whole" / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert saved_omega
    for key in saved_omega:  # trained on from the same omegas
        assert torch.allclose(resumed_model["model"][key], whole_model["model"][key], atol=0.02)


def admin_profile(data_bin, tmp_path, name, *flags):
    """One update of Admin with ``flags``: (its profile JSON, an fp32 copy of its model before
    the update)."""
    logs = fairseq_train(
        data_bin,
        tmp_path / name,
        "transformer_admin",
        *flags,
        *("--admin-profile-json", tmp_path / f"{name}.json"),
        updates=1,
        keep_model_at_start=True,
    )
    return json.loads((tmp_path / f"{name}.json").read_text()), logs.start_model


def omegas(profile, stack):
    return [r["omega"] for r in profile[stack]]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_admin_profiles_before_the_half_conversion(precision, tiny_data_bin, tmp_path):
    """Admin's omegas in an fp16 / bf16 run are those of an fp32 run of the same seed and
    batch, exactly: profiling runs before fairseq's Trainer halves the model."""
    exact, _ = admin_profile(tiny_data_bin, tmp_path, "fp32")
    half, _ = admin_profile(tiny_data_bin, tmp_path, precision, f"--{precision}")
    for stack in ("encoder", "decoder"):
        assert omegas(half, stack) == omegas(exact, stack)
        assert all(w > 1 for w in omegas(exact, stack)[1:])  # a real profile, not omega = 1


@pytest.mark.parametrize("precision", PRECISIONS)
def test_admin_profile_precision_profiles_a_half_copy(precision, tiny_data_bin, tmp_path):
    """``--admin-profile-precision fp16|bf16``: the profiling pass runs in half precision (as
    the authors' profiling run under ``--fp16``): omegas near the fp32 profile's but not equal,
    and set in the model as profiled (fairseq then rounds them with the model's other weights)."""
    exact, _ = admin_profile(tiny_data_bin, tmp_path, "fp32")
    half, model = admin_profile(tiny_data_bin, tmp_path, precision, "--admin-profile-precision", precision)
    ulp = {"fp16": 2**-10, "bf16": 2**-7}[precision]
    for stack in ("encoder", "decoder"):
        assert omegas(half, stack) != omegas(exact, stack)
        assert omegas(half, stack) == pytest.approx(omegas(exact, stack), rel=32 * ulp)
        trained = [getattr(model, stack).layers[r["layer"]].omega[r["sublayer"]] for r in half[stack]]
        assert all(torch.equal(t, torch.full_like(t, w)) for t, w in zip(trained, omegas(half, stack)))


def test_amp_without_cuda_is_refused_in_one_line(tiny_data_bin, tmp_path):
    """``--amp`` is torch.cuda.amp: on a CPU it would train in fp32 and say nothing."""
    import subprocess

    from conftest import BIN

    proc = subprocess.run(
        [str(BIN / "fairseq-train"), str(tiny_data_bin), "--user-dir", str(PLUGIN_DIR), "--arch", "transformer_preln"]
        + [*TINY_MODEL, "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "500", "--cpu", "--amp"]
        + ["--save-dir", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == (
        "fairseq: --amp is torch.cuda.amp and trains in fp32 without a CUDA device; on a CPU use --fp16 or --bf16"
    )
    assert not list(tmp_path.glob("*.pt"))


def test_stock_fairseq_cli_trains_in_fp16_and_bf16_on_cpu(tiny_data_bin, tmp_path):
    """The console script a user types, stock ``transformer`` with the plugin loaded."""
    for precision in PRECISIONS:
        out = run_cli(
            "fairseq-train",
            tiny_data_bin,
            *("--user-dir", PLUGIN_DIR, "--arch", "transformer", *TINY_MODEL),
            *("--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "500", "--max-update", "3", "--cpu"),
            *("--save-dir", tmp_path / precision, "--no-epoch-checkpoints", f"--{precision}"),
            cwd=tmp_path,
        )
        assert "num_updates 3" in out
        assert ("| loss_scale " in out) == (precision == "fp16")


@pytest.fixture
def half_products(monkeypatch):
    """A list that gets the name of every fp16 CPU product :class:`cpu_fp16.HalfProductsInFloat`
    computes in fp32; the mode is used as on a CPU without fp16 arithmetic, whatever this one has."""
    computed, dispatch = [], cpu_fp16.HalfProductsInFloat.__torch_dispatch__
    monkeypatch.setattr(cpu_fp16, "native_fp16_products", lambda: False)

    def counting(self, func, types, args=(), kwargs=None):
        if func in cpu_fp16.PRODUCTS and cpu_fp16._half_on_cpu(func, (args, kwargs or {})):
            computed.append(func.__name__)
        return dispatch(self, func, types, args, kwargs)

    monkeypatch.setattr(cpu_fp16.HalfProductsInFloat, "__torch_dispatch__", counting)
    return computed


@pytest.fixture
def phases(monkeypatch, half_products):
    """A list that gets, for each criterion call (a training or a validation forward pass) and
    each backward pass of a fairseq-train run: (phase, whether the mode is on, how many fp16
    products it computed in fp32 meanwhile)."""
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion

    seen, forward, backward = [], CrossEntropyCriterion.forward, torch.Tensor.backward

    def recorded(phase, call):
        before = len(half_products)
        result = call()
        seen.append((phase, cpu_fp16.active(), len(half_products) - before))
        return result

    def criterion(self, model, sample, reduce=True):
        phase = "train" if model.training else "valid"
        return recorded(phase, lambda: forward(self, model, sample, reduce))

    def tensor_backward(tensor, *args, **kwargs):
        return recorded("backward", lambda: backward(tensor, *args, **kwargs))

    monkeypatch.setattr(CrossEntropyCriterion, "forward", criterion)
    monkeypatch.setattr(torch.Tensor, "backward", tensor_backward)
    return seen


def test_fp16_steps_on_cpu_compute_their_products_in_fp32(tiny_data_bin, tmp_path, phases, monkeypatch):
    """``_compat.fp16_cpu_products``: an fp16 run's training forward and backward passes and its
    validation run in the mode, and the mode computes their products; the losses are those of
    torch's own fp16 kernels (a CPU with fp16 arithmetic keeps them) within accumulation-order
    rounding. bf16 and fp32 runs never enter it."""
    fp16 = fairseq_train(tiny_data_bin, tmp_path / "fp16", "transformer_preln", "--fp16", updates=8)
    assert {phase for phase, _, _ in phases} == {"train", "backward", "valid"}
    assert all(on and products > 0 for _, on, products in phases), phases
    phases.clear()
    for name, flags in (("bf16", ["--bf16"]), ("fp32", [])):
        fairseq_train(tiny_data_bin, tmp_path / name, "transformer_preln", *flags, updates=2)
    assert phases and not any(on for _, on, _ in phases), phases
    phases.clear()
    monkeypatch.setattr(cpu_fp16, "native_fp16_products", lambda: True)
    native = fairseq_train(tiny_data_bin, tmp_path / "native", "transformer_preln", "--fp16", updates=8)
    assert phases and not any(on for _, on, _ in phases), phases
    assert losses(fp16) == pytest.approx(losses(native), abs=0.01)
    valid = [float(run.of("valid")[-1]["valid_loss"]) for run in (fp16, native)]
    assert valid[0] == pytest.approx(valid[1], abs=0.01)


def test_beam_search_with_an_fp16_model_on_cpu_computes_its_products_in_fp32(
    tiny_data_bin, tmp_path, half_products, monkeypatch
):
    """``fairseq-generate --fp16`` and ``--eval-bleu`` on a CPU: ``SequenceGenerator`` with an
    fp16 model runs in the mode: at least 9 in 10 of its best hypotheses are those of torch's
    own fp16 kernels, with the same score within rounding (where two hypotheses are that
    close, either may win)."""
    from fairseq.sequence_generator import SequenceGenerator

    trained = fairseq_train(tiny_data_bin, tmp_path, "transformer_preln", "--fp16", updates=30)
    task, model = trained.trainer.task, trained.model.eval()
    batches = task.get_batch_iterator(dataset=task.dataset("valid"), max_tokens=500).next_epoch_itr(shuffle=False)
    sample = next(iter(batches))
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=12)
    half_products.clear()
    ours = generator.generate([model], sample)
    assert "bmm.default" in half_products
    monkeypatch.setattr(cpu_fp16, "native_fp16_products", lambda: True)
    count = len(half_products)
    theirs = generator.generate([model], sample)
    assert len(half_products) == count
    assert len(ours) == len(theirs) == sample["nsentences"]
    same = [(m[0], n[0]) for m, n in zip(ours, theirs) if m[0]["tokens"].tolist() == n[0]["tokens"].tolist()]
    assert len(same) >= 0.9 * len(ours)
    assert all(float(m["score"]) == pytest.approx(float(n["score"]), abs=0.005) for m, n in same)


def test_generate_bf16_decodes_a_plugin_model_in_bf16(tiny_data_bin, tmp_path, monkeypatch):
    """fairseq-generate casts the model for ``--fp16`` only (generate.py), so with ``--bf16`` it
    would decode in fp32 (``_compat`` patch ``bf16_decoding``): a plugin model is cast in its
    ``prepare_for_inference_``, and with the patch off decodes as in fp32, score for score."""
    import argparse

    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import generate

    model = fairseq_train(tiny_data_bin, tmp_path, "transformer_preln", updates=20).model

    def prepared(bf16, path):
        """The model's dtypes after ``prepare_for_inference_`` with a tool's (``path``) or a
        checkpoint's training configuration (``from_pretrained``: no path)."""
        cfg = argparse.Namespace(
            common=argparse.Namespace(fp16=False, bf16=bf16),
            common_eval=argparse.Namespace(path=path),
            generation=argparse.Namespace(),
        )
        model.float().prepare_for_inference_(cfg)
        return {p.dtype for p in model.parameters()}

    assert prepared(bf16=True, path="checkpoint_last.pt") == {torch.bfloat16}
    assert prepared(bf16=False, path="checkpoint_last.pt") == {torch.float32}
    assert prepared(bf16=True, path=None) == {torch.float32}  # a bf16-trained checkpoint's own cfg

    def scores(name, *flags):
        """fairseq-generate's entry point in this process: its positional scores per sentence."""
        argv = [str(tiny_data_bin), "--user-dir", str(PLUGIN_DIR), "--path", str(tmp_path / "checkpoint_last.pt")]
        argv += ["--gen-subset", "valid", "--beam", "2", "--max-tokens", "500", "--cpu", "--results-path"]
        argv += [str(tmp_path / name), *flags]
        generate.main(
            convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_generation_parser(), argv))
        )
        lines = (tmp_path / name / "generate-valid.txt").read_text().splitlines()
        return sorted(line for line in lines if line.startswith("P-"))

    fp32, bf16 = scores("fp32"), scores("bf16", "--bf16")
    monkeypatch.setenv("FAIRSEQ_LAYERNORM_PLUGINS_NO_PATCH", "bf16_decoding")
    off = scores("off", "--bf16")
    assert len(fp32) == len(bf16) > 0
    assert bf16 != fp32
    assert off == fp32
