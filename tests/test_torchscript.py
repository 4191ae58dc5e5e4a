"""TorchScript: every registered arch scripts (as fairseq's own transformer does, fairseq's
tests/test_export.py), gives the eager model's outputs, survives ``torch.jit.save`` /
``load``, and a scripted beam search translates as the eager one."""

import io

import pytest
import torch
from conftest import TINY_MODEL, batch, build, plugin_archs
from fairseq.models import MODEL_REGISTRY
from fairseq.sequence_generator import SequenceGenerator

from fairseq_layernorm_plugins.models.base import ARCH_FAMILIES

SCRIPTABLE = sorted(family for family in ARCH_FAMILIES if MODEL_REGISTRY[family].scriptable)
# every scriptable method with its options that change the forward pass
VARIANTS = [(family, ()) for family in SCRIPTABLE] + [
    ("transformer_b2t", ("--b2t-no-layer-norm",)),
    ("transformer_admin", ("--admin-init", "closed-logn")),
    ("transformer_preln", ("--fused-attention",)),
]


def scripted_pair(data_bin, arch, flags):
    model, task, _ = build(data_bin, arch, *TINY_MODEL, *flags)
    with torch.no_grad():  # omega away from 1 so that a wrong sub-layer index would show
        for name, p in model.named_parameters():
            if name.endswith("omega"):
                p.uniform_(0.5, 2.0)
            if name.endswith("dlcl.weights"):  # DLCL's W away from the average: a wrong row would show
                p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)).tril())
    model.eval()
    return model, torch.jit.script(model), task


@pytest.mark.parametrize("family, flags", VARIANTS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_scripted_model_equals_eager(tiny_data_bin, family, flags):
    model, scripted, task = scripted_pair(tiny_data_bin, family, flags)
    net_input = batch(task)["net_input"]
    with torch.no_grad():
        expected = model(**net_input)[0]
        torch.testing.assert_close(scripted(**net_input)[0], expected, rtol=1e-5, atol=1e-5)
        buffer = io.BytesIO()
        torch.jit.save(scripted, buffer)
        buffer.seek(0)
        torch.testing.assert_close(torch.jit.load(buffer)(**net_input)[0], expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(model(**net_input)[0], expected)  # the eager model still runs as before


def test_every_method_but_residual_scripts():
    """ResiDual's dual stream passes between layers outside fairseq's layer interface; every
    other method scripts, DLCL (both variants) included: its stacks run the layers from the
    history in their own loop."""
    assert {"transformer_dlcl", "transformer_dlcl_postnorm"} <= set(SCRIPTABLE)
    assert set(ARCH_FAMILIES) - set(SCRIPTABLE) == {"transformer_residual"}


def test_every_registered_arch_scripts_or_says_why_not(tiny_data_bin):
    """Every arch, each method's base arch but in test_scripted_model_equals_eager, which scripts
    those (and compares them with the eager model)."""
    for arch, family in sorted(plugin_archs().items()):
        if arch in SCRIPTABLE:
            continue
        model, _, _ = build(tiny_data_bin, arch, *TINY_MODEL)
        if MODEL_REGISTRY[family].scriptable:
            torch.jit.script(model.eval())
        else:
            with pytest.raises(RuntimeError, match="no TorchScript") as err:
                torch.jit.script(model.eval())
            assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "family, flags", [("transformer_admin", ()), ("transformer_b2t", ()), ("transformer_dlcl_postnorm", ())]
)
def test_scripted_beam_search_translates_as_eager(tiny_data_bin, family, flags):
    """Incremental decoding through fairseq's scripted SequenceGenerator (beam 3); DLCL's
    decoder runs its own layer loop, its history anew at every step."""
    model, _, task = scripted_pair(tiny_data_bin, family, flags)
    sample = {"net_input": batch(task, n=4)["net_input"]}  # the type the scripted generator takes
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=20)
    with torch.no_grad():
        eager = generator.forward(sample)
        scripted = torch.jit.script(generator).forward(sample)
    for hyps_e, hyps_s in zip(eager, scripted):
        assert [h["tokens"].tolist() for h in hyps_e] == [h["tokens"].tolist() for h in hyps_s]
        torch.testing.assert_close(torch.stack([h["score"] for h in hyps_s]), torch.stack([h["score"] for h in hyps_e]))


@pytest.mark.parametrize("family", ["transformer_admin", "transformer_b2t"])
def test_pass_cut_short_leaves_nothing_behind(tiny_data_bin, family):
    """An exception between two sub-layers (fairseq's out-of-memory recovery continues after
    one) must not shift the sub-layer numbering of the next pass."""
    model, _, task = scripted_pair(tiny_data_bin, family, ())
    net_input = batch(task)["net_input"]
    with torch.no_grad():
        expected = model(**net_input)[0]
        layer = model.encoder.layers[0]
        fc1 = layer.fc1

        def out_of_memory(*_):
            raise RuntimeError("CUDA out of memory (simulated)")

        handle = fc1.register_forward_pre_hook(out_of_memory)  # after sub-layer 1, before sub-layer 2
        with pytest.raises(RuntimeError, match="simulated"):
            model(**net_input)
        handle.remove()
        assert layer.sublayer == 1
        torch.testing.assert_close(model(**net_input)[0], expected)
