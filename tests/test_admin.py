"""Admin (Liu et al. 2020): profiled and closed-form omega, and the in-run profiling hook."""

import json
import math

import numpy as np
import pytest
import torch
from conftest import PLUGIN_DIR, TINY_MODEL, batch, build, run_cli

from fairseq_layernorm_plugins.admin_profiling import profile_admin_
from fairseq_layernorm_plugins.modules import stack_layers

ARCH = "transformer_admin_iwslt_de_en"
DIMS = [*TINY_MODEL, "--encoder-layers", "3", "--decoder-layers", "2", "--dropout", "0.3"]


def sequential_reference(model, sample, seed, keep=None):
    """The authors' sequential rule, computed from outside the layers: per stack a ratio
    starts at 1.0; for each sub-layer k in forward order, omega_k is set to the ratio and
    the whole forward pass is re-run with the same dropout masks (same seed); hooks read
    the LayerNorm input z_k = x * omega_k + f_k and the dropout-applied branch f_k, and
    the ratio becomes sqrt(Var(z_k - f_k) + Var(f_k)) (np.var in float64 over the whole
    tensor, or the positions ``keep[stack]`` (T, B) marks). Returns {stack: [omega_k]}."""
    captured = {"ln": [], "branch": []}
    hooks = []
    for stack in ("encoder", "decoder"):
        for layer in getattr(model, stack).layers:
            norms = (
                [layer.self_attn_layer_norm]
                + ([layer.encoder_attn_layer_norm] if stack == "decoder" else [])
                + [layer.final_layer_norm]
            )
            hooks += [
                norm.register_forward_pre_hook(lambda m, a: captured["ln"].append(a[0].detach().double()))
                for norm in norms
            ]
            hooks.append(
                layer.dropout_module.register_forward_hook(
                    lambda m, a, out: captured["branch"].append(out.detach().double())
                )
            )
    omegas, offset = {}, 0
    try:
        with torch.no_grad():
            for layers in model.admin_layers().values():
                for layer in layers:
                    layer.omega.fill_(1.0)
            model.train()
            for stack in ("encoder", "decoder"):
                layers = getattr(model, stack).layers
                ratio, omegas[stack] = 1.0, []
                for k, (layer, sub) in enumerate((lay, s) for lay in layers for s in range(lay.num_sublayers)):
                    layer.omega[sub].fill_(ratio)
                    omegas[stack].append(ratio)
                    captured["ln"].clear(), captured["branch"].clear()
                    torch.manual_seed(seed)
                    model(**sample["net_input"])
                    z, f = captured["ln"][offset + k], captured["branch"][offset + k]
                    if keep is not None:
                        z, f = z[keep[stack]], f[keep[stack]]
                    ratio = math.sqrt(np.var((z - f).numpy()) + np.var(f.numpy()))
                offset += sum(layer.num_sublayers for layer in layers)
    finally:
        for hook in hooks:
            hook.remove()
    return omegas


def first_train_batches(data_bin, num_batches):
    """The first batches of epoch 1 of ``admin_train``'s run (its --max-tokens and --seed), from
    fairseq's own batch iterator: the batches the run profiles."""
    model, task, _ = build(data_bin, ARCH, *DIMS)
    task.load_dataset("train")
    iterator = task.get_batch_iterator(
        dataset=task.dataset("train"),
        max_tokens=1000,
        max_positions=model.max_positions(),
        required_batch_size_multiple=8,
        seed=3,
        epoch=1,
    ).next_epoch_itr(shuffle=True)
    return [next(iterator) for _ in range(num_batches)]


def profile_of(data_bin, weights, batches, mask_padding=False):
    """Omega profiled on ``weights`` (a state dict; omega not needed) with dropout off:
    {stack: [omega_k]}, the mean of :func:`sequential_reference` over ``batches``."""
    model, task, _ = build(data_bin, ARCH, *DIMS, "--dropout", "0")
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected and all(key.endswith(".omega") for key in missing)
    pad = task.source_dictionary.pad()
    runs = []
    for sample in batches:
        net = sample["net_input"]
        keep = {"encoder": net["src_tokens"].ne(pad).t(), "decoder": net["prev_output_tokens"].ne(pad).t()}
        runs.append(sequential_reference(model, sample, seed=0, keep=keep if mask_padding else None))
    return {stack: [float(np.mean(values)) for values in zip(*(run[stack] for run in runs))] for stack in runs[0]}


def json_omegas(report):
    return {stack: [row["omega"] for row in report[stack]] for stack in ("encoder", "decoder")}


def checkpoint_omegas(state):
    """{stack: [omega_k]} of a checkpoint's model state, each omega vector checked to hold one value."""
    omegas = {}
    for stack in ("encoder", "decoder"):
        keys = sorted(
            (k for k in state if k.startswith(f"{stack}.") and k.endswith(".omega")), key=lambda k: int(k.split(".")[2])
        )
        vectors = [vector for key in keys for vector in state[key]]  # (num_sublayers, C) per layer
        assert all(torch.equal(v, torch.full_like(v, v[0].item())) for v in vectors)
        omegas[stack] = [v[0].item() for v in vectors]
    return omegas


def assert_omegas_equal(got, expected, rel=1e-4):
    for stack in ("encoder", "decoder"):
        assert got[stack] == pytest.approx(expected[stack], rel=rel), stack


def max_rel_difference(a, b):
    return max(abs(x - y) / y for stack in ("encoder", "decoder") for x, y in zip(a[stack], b[stack]))


@pytest.mark.parametrize("mask_padding", [False, True])
def test_profiled_omega_is_the_authors_sequential_rule(tiny_data_bin, mask_padding):
    model, task, _ = build(tiny_data_bin, ARCH, *DIMS)
    sample = batch(task, n=16)
    pad = task.source_dictionary.pad()
    keep = {
        "encoder": sample["net_input"]["src_tokens"].ne(pad).t(),
        "decoder": sample["net_input"]["prev_output_tokens"].ne(pad).t(),
    }
    assert not keep["encoder"].all() and not keep["decoder"].all(), "the batch must contain padding"
    torch.manual_seed(5)
    report = profile_admin_(model, [sample], mask_padding=mask_padding)
    profiled = {s: [lay.omega.detach().clone() for lay in getattr(model, s).layers] for s in ("encoder", "decoder")}

    expected = sequential_reference(model, sample, seed=5, keep=keep if mask_padding else None)
    for stack, sublayers in (("encoder", 2), ("decoder", 3)):
        got = [profiled[stack][i][s] for i in range(len(profiled[stack])) for s in range(sublayers)]
        assert len(got) == len(expected[stack]) == len(report[stack]) and expected[stack][0] == 1.0
        for e, g, row in zip(expected[stack], got, report[stack]):
            assert torch.allclose(g, torch.full_like(g, e), rtol=1e-4, atol=0), (stack, e, g[0].item())
            assert row["omega"] == pytest.approx(e, rel=1e-4)
        assert max(expected[stack]) > 1.5  # the rule compounds: a check that can tell it from omega = 1


@pytest.mark.parametrize(
    "init, value",
    [
        ("closed-logn", lambda n: math.sqrt((n + 1) / math.log(n + 1) - 1)),
        ("closed-n", lambda n: 1.0),
        ("closed-1", lambda n: math.sqrt(n)),
        ("none", lambda n: 1.0),
    ],
)
@pytest.mark.parametrize("layerdrop", [[], ["--encoder-layerdrop", "0.5", "--decoder-layerdrop", "0.5"]])
def test_closed_forms(tiny_data_bin, init, value, layerdrop):
    """One omega per stack from its own n: 2 encoder layers give n = 2 * 2 = 4 sub-layers,
    3 decoder layers n = 3 * 3 = 9 (a mix-up of the stacks, or of 2 and 3, gives another n)."""
    depths = ["--encoder-layers", "2", "--decoder-layers", "3"]
    model = build(tiny_data_bin, ARCH, *DIMS, *depths, "--admin-init", init, *layerdrop)[0]
    assert model.training  # where LayerDrop skips layers when a stack's layers are iterated
    for stack, n in (("encoder", 2 * 2), ("decoder", 3 * 3)):
        for layer in stack_layers(getattr(model, stack)):
            assert torch.allclose(layer.omega, torch.full_like(layer.omega, value(n)))
            assert layer.omega.requires_grad


def test_profiling_runs_every_layer_under_layerdrop(tiny_data_bin, tmp_path):
    model, task, _ = build(tiny_data_bin, ARCH, *DIMS, "--encoder-layerdrop", "0.5", "--decoder-layerdrop", "0.5")
    torch.manual_seed(5)
    report = profile_admin_(model, [batch(task, n=16)])
    assert [(r["layer"], r["sublayer"]) for r in report["encoder"]] == [(i, s) for i in range(3) for s in range(2)]
    assert [(r["layer"], r["sublayer"]) for r in report["decoder"]] == [(i, s) for i in range(2) for s in range(3)]
    assert model.encoder.layers.p == model.decoder.layers.p == 0.5  # LayerDrop is back for training
    omegas = [layer.omega[s, 0].item() for layer in stack_layers(model.encoder) for s in range(2)]
    assert omegas[0] == 1.0 and all(w > 1.0 for w in omegas[1:])

    log = admin_train(
        tiny_data_bin, tmp_path / "ckpt", 2, "--encoder-layerdrop", "0.5", "--decoder-layerdrop", "0.5", cwd=tmp_path
    )
    assert "Admin profile encoder layer 2 sub-layer 1" in log and "Admin: profiled 1 batch(es)" in log


def test_omega_is_per_sublayer_and_trainable(tiny_data_bin):
    model = build(tiny_data_bin, ARCH, *DIMS)[0]
    assert [tuple(lay.omega.shape) for lay in model.encoder.layers] == [(2, 32)] * 3
    assert [tuple(lay.omega.shape) for lay in model.decoder.layers] == [(3, 32)] * 2
    assert "encoder.layers.0.omega" in model.state_dict()


def admin_train(data_bin, save, max_update, *extra, cwd):
    return run_cli(
        "fairseq-train",
        data_bin,
        "--user-dir",
        PLUGIN_DIR,
        "--arch",
        ARCH,
        *DIMS,
        "--optimizer",
        "radam",
        "--lr",
        "1e-9",
        "--max-tokens",
        "1000",
        "--max-update",
        max_update,
        "--cpu",
        "--seed",
        "3",
        "--save-dir",
        save,
        "--no-epoch-checkpoints",
        "--no-progress-bar",
        *extra,
        cwd=cwd,
    )


def test_one_command_profiles_trains_resumes_and_generates(tiny_data_bin, tmp_path):
    save, report = tmp_path / "ckpt", tmp_path / "profile.json"
    log = admin_train(tiny_data_bin, save, 1, "--admin-profile-json", report, cwd=tmp_path)
    assert "Admin profile encoder layer 2 sub-layer 1" in log and "Admin profile decoder layer 1 sub-layer 2" in log
    profiled = json.loads(report.read_text())
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    for stack, _sublayers in (("encoder", 2), ("decoder", 3)):
        for row in profiled[stack]:
            omega = state[f"{stack}.layers.{row['layer']}.omega"][row["sublayer"]]
            # after one update at lr 1e-9 omega is still the profiled value: nothing overwrote it
            assert torch.allclose(omega, torch.full_like(omega, row["omega"]), atol=1e-5)
    assert profiled["encoder"][0]["omega"] == 1.0 and profiled["encoder"][1]["omega"] > 1.0

    report.unlink()  # nothing is needed after training
    resumed = admin_train(tiny_data_bin, save, 3, cwd=tmp_path)
    assert "not profiling" in resumed and "Admin profile" not in resumed
    assert "Loaded checkpoint" in resumed and not report.exists()

    out = run_cli(
        "fairseq-generate",
        tiny_data_bin,
        "--user-dir",
        PLUGIN_DIR,
        "--path",
        save / "checkpoint_last.pt",
        "--gen-subset",
        "test",
        "--beam",
        "2",
        "--batch-size",
        "16",
        "--cpu",
        cwd=tmp_path,
    )
    assert sum(line.startswith("H-") for line in out.splitlines()) == 40
    assert "Admin profile" not in out


RESET = ["--reset-optimizer", "--reset-lr-scheduler", "--reset-meters", "--reset-dataloader"]


@pytest.fixture(scope="module")
def admin_checkpoint(tiny_data_bin, tmp_path_factory):
    save = tmp_path_factory.mktemp("admin")
    admin_train(tiny_data_bin, save, 1, cwd=save)
    return save / "checkpoint_last.pt"


@pytest.mark.parametrize(
    "how",
    [["--continue-once"], ["--restore-file"], ["--restore-file", *RESET], ["--finetune-from-model"]],
    ids=["continue-once", "restore-file", "restore-file+reset", "finetune-from-model"],
)
def test_every_way_of_starting_from_an_admin_checkpoint_keeps_its_omega(tiny_data_bin, tmp_path, admin_checkpoint, how):
    flags = [how[0], admin_checkpoint, *how[1:]]
    log = admin_train(tiny_data_bin, tmp_path / "ckpt", 2, *flags, cwd=tmp_path)
    assert f"omega comes from {admin_checkpoint}" in log and "Admin profile" not in log
    before = torch.load(admin_checkpoint, map_location="cpu", weights_only=False)["model"]
    after = torch.load(tmp_path / "ckpt" / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    for key in (k for k in before if k.endswith("omega")):  # lr 1e-9: still the checkpoint's omega
        torch.testing.assert_close(after[key], before[key], atol=1e-5, rtol=0)


def test_a_post_ln_checkpoint_is_profiled_on_its_own_weights(tiny_data_bin, tmp_path):
    """--restore-file of a Post-LN checkpoint: omega is the authors' rule on the checkpoint's
    weights (recomputed here, dropout off), not on a fresh initialisation (whose profile
    differs), and the run starts from those weights and that omega."""
    post_ln = tmp_path / "postln"
    run_cli(
        "fairseq-train",
        tiny_data_bin,
        "--user-dir",
        PLUGIN_DIR,
        "--arch",
        "transformer_postln_iwslt_de_en",
        *DIMS,
        "--optimizer",
        "adam",
        "--lr",
        "1e-3",
        "--max-tokens",
        "1000",
        "--max-update",
        "2",
        "--cpu",
        "--seed",
        "4",
        "--save-dir",
        post_ln,
        "--no-epoch-checkpoints",
        "--no-progress-bar",
        cwd=tmp_path,
    )
    report = tmp_path / "profile.json"
    log = admin_train(
        tiny_data_bin,
        tmp_path / "admin",
        1,
        "--restore-file",
        post_ln / "checkpoint_last.pt",
        *RESET,
        "--admin-profile-json",
        report,
        "--dropout",
        "0",
        cwd=tmp_path,
    )
    assert "holds no omega; profiling its weights" in log and "Loaded checkpoint" in log
    source = torch.load(post_ln / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    batches = first_train_batches(tiny_data_bin, 1)
    expected = profile_of(tiny_data_bin, source, batches)
    assert_omegas_equal(json_omegas(json.loads(report.read_text())), expected)
    fresh = build(tiny_data_bin, ARCH, *DIMS, seed=3)[0].state_dict()  # the Admin run's own initialisation
    assert max_rel_difference(profile_of(tiny_data_bin, fresh, batches), expected) > 1e-2
    trained = torch.load(tmp_path / "admin" / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    assert_omegas_equal(checkpoint_omegas(trained), expected)  # the load kept them
    # the weights the Admin run started from are the Post-LN checkpoint's (lr 1e-9 since)
    torch.testing.assert_close(
        trained["encoder.layers.0.fc1.weight"], source["encoder.layers.0.fc1.weight"], atol=1e-6, rtol=0
    )


def test_profile_batches_and_mask_padding_from_the_command_line(tiny_data_bin, tmp_path):
    """--admin-profile-batches 2 --admin-profile-mask-padding: each omega is the mean of its
    values on the first 2 training batches with padding left out of the variances, recomputed
    here from the run's initial weights; one batch, or the padding kept, gives other values."""
    save, report = tmp_path / "ckpt", tmp_path / "profile.json"
    flags = ["--admin-profile-batches", "2", "--admin-profile-mask-padding", "--admin-profile-json", report]
    log = admin_train(tiny_data_bin, save, 1, "--dropout", "0", *flags, cwd=tmp_path)
    assert "Admin: profiled 2 batch(es)" in log
    profiled = json.loads(report.read_text())
    # RAdam takes no step while rho_t < 5: the checkpoint holds the profiled weights and omega
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    batches = first_train_batches(tiny_data_bin, 2)
    expected = profile_of(tiny_data_bin, state, batches, mask_padding=True)
    assert profiled["batches"] == 2
    assert_omegas_equal(json_omegas(profiled), expected)
    assert_omegas_equal(checkpoint_omegas(state), expected)
    assert max_rel_difference(profile_of(tiny_data_bin, state, batches[:1], mask_padding=True), expected) > 1e-3
    assert max_rel_difference(profile_of(tiny_data_bin, state, batches, mask_padding=False), expected) > 1e-3


def test_profile_from_another_runs_json(tiny_data_bin, tmp_path):
    """``--admin-profile-from``: a seed-2 run takes seed 1's profiled omegas (the authors' one
    profile for every seed) instead of profiling its own, which differ; a profile of another
    depth is refused in one line naming the file."""
    from helpers.in_process import fairseq_train

    def run(name, *flags):
        json_path = tmp_path / f"{name}.json"
        logs = fairseq_train(
            tiny_data_bin,
            tmp_path / name,
            "transformer_admin",
            *flags,
            "--admin-profile-json",
            json_path,
            updates=1,
            keep_model_at_start=True,
        )
        return (json.loads(json_path.read_text()) if json_path.exists() else None), logs.start_model

    seed1, _ = run("seed1")
    seed2, _ = run("seed2", "--seed", 2)
    taken, model = run("taken", "--seed", 2, "--admin-profile-from", tmp_path / "seed1.json")
    assert taken is None  # not profiled
    for stack in ("encoder", "decoder"):
        assert [r["omega"] for r in seed2[stack]] != [r["omega"] for r in seed1[stack]]
        for r in seed1[stack]:
            omega = getattr(model, stack).layers[r["layer"]].omega[r["sublayer"]]
            assert torch.equal(omega, torch.full_like(omega, r["omega"]))
    with pytest.raises(ValueError, match=r"seed1\.json: its encoder rows are not this model's 6 encoder sub-layers"):
        run("deeper", "--encoder-layers", 3, "--admin-profile-from", tmp_path / "seed1.json")


def test_profiling_without_its_trainer_hook_is_refused_in_one_line(tiny_data_bin, monkeypatch):
    """The Trainer hook Admin profiles in is ``_compat``'s ``admin_profiling`` patch: turned off,
    a profiling model refuses to build (it would train with omega = 1); a closed form builds."""
    from fairseq_layernorm_plugins import _compat

    monkeypatch.setenv(_compat.SWITCH, "admin_profiling")
    with pytest.raises(ValueError, match="--admin-init profile needs the Trainer hook") as err:
        build(tiny_data_bin, "transformer_admin", *TINY_MODEL)
    assert "\n" not in str(err.value)
    model, _, _ = build(tiny_data_bin, "transformer_admin", *TINY_MODEL, "--admin-init", "closed-logn")
    assert all(layer.omega.ne(1).all() for layers in model.admin_layers().values() for layer in layers)
