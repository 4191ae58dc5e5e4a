"""Admin in the core (``layernorm_methods``): its models compute what the fairseq archs compute on
the same weights and omegas, its profiling (``layernorm_methods.admin``) sets the omegas the
fairseq plugin's profiling sets, and on a core model alone it follows the authors' sequential
rule."""

import math

import numpy as np
import pytest
import torch
from conftest import batch
from helpers.core_equality import DROPOUT, assert_same, twins

from fairseq_layernorm_plugins import admin_profiling
from layernorm_methods import build_language_model
from layernorm_methods.admin import admin_layers, profile_admin_


@pytest.mark.parametrize("flags", [(), ("--admin-init", "closed-logn")])
def test_translation_models_match(tiny_data_bin, flags):
    assert_same(tiny_data_bin, "admin", "translation", *flags)


@pytest.mark.parametrize("flags", [(), ("--admin-init", "closed-logn")])
def test_language_models_match(lm_data_bin, flags):
    assert_same(lm_data_bin, "admin", "lm", *flags)


def profiling_inputs(task, kind):
    """(the fairseq sample, the core model's batch) of the same sentences, padded."""
    if kind == "lm":
        task.load_dataset("valid")
        dataset = task.dataset("valid")
        sample = dataset.collater([dataset[i] for i in range(4)])
        return sample, (sample["net_input"]["src_tokens"],)
    sample = batch(task, n=16)
    return sample, (sample["net_input"]["src_tokens"], sample["net_input"]["prev_output_tokens"])


def omegas(model):
    """{stack: [omega (C,) of each sub-layer, bottom to top]}."""
    return {
        stack: [row.detach().clone() for layer in layers for row in layer.omega]
        for stack, layers in admin_layers(model).items()
    }


@pytest.mark.parametrize(
    "kind, mask_padding", [("translation", False), ("translation", True), ("lm", False)], ids=["mt", "mt-mask", "lm"]
)
def test_core_profiling_sets_the_fairseq_profiles_omegas(tiny_data_bin, lm_data_bin, kind, mask_padding):
    """The fairseq model through the plugin's profiling (fairseq samples, LayerDrop, its padding
    masks) and its core twin through the core's, on the same batch from the same random state
    (the same dropout masks): the same omegas, and the same report."""
    data_bin = lm_data_bin if kind == "lm" else tiny_data_bin
    model, core, task = twins(data_bin, "admin", kind, (2, 3), *DROPOUT)
    sample, core_batch = profiling_inputs(task, kind)
    pad = task.source_dictionary.pad()
    if mask_padding:
        assert core_batch[0].eq(pad).any() and core_batch[1].eq(pad).any(), "the batch must contain padding"

    def core_masks(core, tokens):
        return {"encoder": tokens[0].eq(pad), "decoder": tokens[1].eq(pad)}

    torch.manual_seed(5)
    fairseq_report = admin_profiling.profile_admin_(model, [sample], mask_padding=mask_padding)
    torch.manual_seed(5)
    core_report = profile_admin_(core, [core_batch], padding_masks=core_masks if mask_padding else None)

    expected, got = omegas(model), omegas(core)
    assert list(got) == list(expected) == (["decoder"] if kind == "lm" else ["encoder", "decoder"])
    for stack in expected:
        assert len(got[stack]) == len(expected[stack]) == len(core_report[stack])
        for e, g in zip(expected[stack], got[stack]):
            assert torch.allclose(g, e, rtol=0, atol=1e-6), (stack, e[0].item(), g[0].item())
        assert max(e[0].item() for e in expected[stack]) > 1.2  # profiled, not the perturbed initial omegas
        for ours, theirs in zip(core_report[stack], fairseq_report[stack]):
            assert ours.keys() == theirs.keys()
            assert (ours["layer"], ours["sublayer"]) == (theirs["layer"], theirs["sublayer"])
            assert [ours[k] for k in ("var_input", "var_branch", "omega")] == pytest.approx(
                [theirs[k] for k in ("var_input", "var_branch", "omega")], rel=1e-6
            )


def test_core_language_model_profiled_by_the_sequential_rule():
    """On a core model alone: omega_1 = 1, and each next omega is sqrt(Var(x * omega) + Var(f))
    of the sub-layer before it, recomputed here from the activations the pass saw (the layer
    input, the LayerNorms' inputs z = x * omega + f and the dropout-applied branches f; population
    variance over the whole tensor, in float64)."""
    torch.manual_seed(0)
    model = build_language_model(
        "admin", vocab=40, layers=3, embed_dim=16, ffn_embed_dim=32, attention_heads=2, dropout=0.2
    )
    assert all(layer.omega.eq(1).all() for layer in model.decoder.layers)
    tokens = torch.randint(2, 40, (4, 12))
    first, second = model.decoder.layers[0], model.decoder.layers[1]
    seen = {"input": [], "z": [], "f": []}

    def keep(name):
        return lambda module, args, *out: seen[name].append((out[0] if out else args[0]).detach().double())

    hooks = [
        first.register_forward_pre_hook(keep("input")),
        first.self_attn_layer_norm.register_forward_pre_hook(keep("z")),
        first.final_layer_norm.register_forward_pre_hook(keep("z")),
        first.dropout_module.register_forward_hook(keep("f")),
    ]
    try:
        report = profile_admin_(model, [tokens])
    finally:
        for hook in hooks:
            hook.remove()
    assert model.training  # the mode it was in
    x, (z1, z2), (f1, f2) = seen["input"][0], seen["z"], seen["f"]

    omega_1 = 1.0
    assert first.omega[0].eq(omega_1).all()
    assert torch.allclose(z1 - f1, x * omega_1)
    omega_2 = math.sqrt(np.var((x * omega_1).numpy()) + np.var(f1.numpy()))
    assert torch.allclose(first.omega[1], torch.full_like(first.omega[1], omega_2), rtol=1e-5, atol=0)
    h1 = torch.nn.functional.layer_norm(
        z1, (16,), first.self_attn_layer_norm.weight.double(), first.self_attn_layer_norm.bias.double()
    )
    assert torch.allclose(z2 - f2, h1 * omega_2, atol=1e-5)  # the FFN's residual already used omega_2
    omega_3 = math.sqrt(np.var((z2 - f2).numpy()) + np.var(f2.numpy()))
    assert torch.allclose(second.omega[0], torch.full_like(second.omega[0], omega_3), rtol=1e-5, atol=0)

    rows = report["decoder"]
    assert [(r["layer"], r["sublayer"]) for r in rows] == [(i, s) for i in range(3) for s in range(2)]
    assert [r["omega"] for r in rows[:3]] == pytest.approx([omega_1, omega_2, omega_3], rel=1e-5)
    later = [layer.omega[s, 0].item() for layer in model.decoder.layers for s in range(2)][1:]
    assert all(w != 1.0 for w in later) and max(later) > 1.2


def test_profiling_a_model_without_admin_layers_is_refused():
    model = build_language_model("postln", vocab=40, layers=1, embed_dim=16, ffn_embed_dim=32, attention_heads=2)
    with pytest.raises(ValueError, match="no Admin layers"):
        profile_admin_(model, [torch.randint(2, 40, (2, 5))])
