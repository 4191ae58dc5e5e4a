"""Admin (Liu et al. 2020): profiled and closed-form omega, and the in-run profiling hook."""
import json
import math

import numpy as np
import pytest
import torch
from conftest import PLUGIN_DIR, TINY_MODEL, batch, build, run_cli

from fairseq_layernorm_plugins.admin_profiling import profile_admin_

ARCH = "transformer_admin_iwslt_de_en"
DIMS = [*TINY_MODEL, "--encoder-layers", "3", "--decoder-layers", "2", "--dropout", "0.3"]


def authors_omegas(inputs, branches, keep=None):
    """Independent re-computation: np.var in float64 over the whole tensor (or only the
    positions ``keep`` (T, B) marks), running value from 1.0:
    omega_{i+1} = sqrt(Var(x_i * omega_i) + Var(f_i))."""
    def values(t):
        a = t.numpy().astype(np.float64)
        return a if keep is None else a[keep.numpy()]

    omegas, running = [], 1.0
    for x, f in zip(inputs, branches):
        omegas.append(running)
        running = math.sqrt(np.var(values(x) * running) + np.var(values(f)))
    return omegas


def capture_sublayers(layer, inputs, branches, decoder):
    """Hooks recording each sub-layer's input x_i and dropout-applied branch output f_i."""
    hooks = [
        layer.register_forward_pre_hook(lambda m, a: inputs.append(a[0].detach().clone())),
        layer.self_attn_layer_norm.register_forward_hook(lambda m, a, out: inputs.append(out.detach().clone())),
        layer.dropout_module.register_forward_hook(lambda m, a, out: branches.append(out.detach().clone())),
    ]
    if decoder:
        hooks.append(layer.encoder_attn_layer_norm.register_forward_hook(lambda m, a, out: inputs.append(out.detach().clone())))
    return hooks


@pytest.mark.parametrize("mask_padding", [False, True])
def test_profiled_omega_matches_the_authors_formula(tiny_data_bin, mask_padding):
    model, task, _ = build(tiny_data_bin, ARCH, *DIMS)
    sample = batch(task, n=16)
    pad = task.source_dictionary.pad()
    keep = {
        "encoder": sample["net_input"]["src_tokens"].ne(pad).t(),
        "decoder": sample["net_input"]["prev_output_tokens"].ne(pad).t(),
    }
    assert not keep["encoder"].all() and not keep["decoder"].all(), "the batch must contain padding"
    for layers in model.admin_layers().values():
        for layer in layers:
            layer.profile_mask_padding = mask_padding
    torch.manual_seed(5)
    profile_admin_(model, [sample])

    captured = {}
    for stack in ("encoder", "decoder"):
        captured[stack] = ([], [])
        for layer in getattr(model, stack).layers:
            layer._hooks_for_test = capture_sublayers(layer, *captured[stack], decoder=stack == "decoder")
    saved = {s: [l.omega.detach().clone() for l in getattr(model, s).layers] for s in ("encoder", "decoder")}
    with torch.no_grad():
        for layers in model.admin_layers().values():
            for layer in layers:
                layer.omega.fill_(1.0)
        model.train()
        torch.manual_seed(5)  # the same dropout masks as the profiling pass
        model(**sample["net_input"])
    for stack in ("encoder", "decoder"):
        layers = getattr(model, stack).layers
        for layer in layers:
            for h in layer._hooks_for_test:
                h.remove()
        inputs, branches = captured[stack]
        # the decoder's pre-hook / LN hooks fire in sub-layer order within each layer
        n = 3 if stack == "decoder" else 2
        assert len(inputs) == len(branches) == n * len(layers)
        expected = authors_omegas(inputs, branches, keep[stack] if mask_padding else None)
        got = [saved[stack][i][s] for i in range(len(layers)) for s in range(n)]
        assert expected[0] == 1.0
        for e, g in zip(expected, got):
            assert torch.allclose(g, torch.full_like(g, e), atol=1e-5, rtol=0), (stack, e, g[0].item())


@pytest.mark.parametrize(
    "init, value",
    [
        ("closed-logn", lambda n: math.sqrt((n + 1) / math.log(n + 1) - 1)),
        ("closed-n", lambda n: 1.0),
        ("closed-1", lambda n: math.sqrt(n)),
        ("none", lambda n: 1.0),
    ],
)
def test_closed_forms(tiny_data_bin, init, value):
    model = build(tiny_data_bin, ARCH, *DIMS, "--admin-init", init)[0]
    for stack, n in (("encoder", 2 * 3), ("decoder", 3 * 2)):
        for layer in getattr(model, stack).layers:
            assert torch.allclose(layer.omega, torch.full_like(layer.omega, value(n)))
            assert layer.omega.requires_grad


def test_omega_is_per_sublayer_and_trainable(tiny_data_bin):
    model = build(tiny_data_bin, ARCH, *DIMS)[0]
    assert [tuple(l.omega.shape) for l in model.encoder.layers] == [(2, 32)] * 3
    assert [tuple(l.omega.shape) for l in model.decoder.layers] == [(3, 32)] * 2
    assert "encoder.layers.0.omega" in model.state_dict()


def admin_train(data_bin, save, max_update, *extra, cwd):
    return run_cli(
        "fairseq-train", data_bin, "--user-dir", PLUGIN_DIR, "--arch", ARCH, *DIMS,
        "--optimizer", "radam", "--lr", "1e-9", "--max-tokens", "1000", "--max-update", max_update,
        "--cpu", "--seed", "3", "--save-dir", save, "--no-epoch-checkpoints", "--no-progress-bar", *extra, cwd=cwd,
    )


def test_one_command_profiles_trains_resumes_and_generates(tiny_data_bin, tmp_path):
    save, report = tmp_path / "ckpt", tmp_path / "profile.json"
    log = admin_train(tiny_data_bin, save, 1, "--admin-profile-json", report, cwd=tmp_path)
    assert "Admin profile encoder layer 2 sub-layer 1" in log and "Admin profile decoder layer 1 sub-layer 2" in log
    profiled = json.loads(report.read_text())
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    for stack, sublayers in (("encoder", 2), ("decoder", 3)):
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
        "fairseq-generate", tiny_data_bin, "--user-dir", PLUGIN_DIR, "--path", save / "checkpoint_last.pt",
        "--gen-subset", "test", "--beam", "2", "--batch-size", "16", "--cpu", cwd=tmp_path,
    )
    assert sum(line.startswith("H-") for line in out.splitlines()) == 40
    assert "Admin profile" not in out
