"""DeepNet's two initialisations by its authors (``--deepnet-init paper|torchscale``), each
against formulas written out here, and alpha under ``--encoder-layers-to-keep``."""

import math

import pytest
import torch
from conftest import build

N, M, D, FFN = 4, 2, 64, 128  # distinct depths, so encoder and decoder factors differ
DIMS = [
    *("--encoder-embed-dim", D, "--decoder-embed-dim", D),
    *("--encoder-ffn-embed-dim", FFN, "--decoder-ffn-embed-dim", FFN),
    *("--encoder-layers", N, "--decoder-layers", M),
    *("--encoder-attention-heads", 4, "--decoder-attention-heads", 4),
]
ARCH = "transformer_deepnet_wmt_en_de"

# written out from torchscale (architecture/encoder.py, decoder.py at 4d1e0e8), not imported:
# encoder: p /= (N^4 M)^0.0625 / 1.15; decoder: p /= (12 M)^0.25, for fc1/fc2/v_proj/out_proj
# weights and biases. Encoder alpha 0.81 (N^4 M)^0.0625, decoder alpha (3 M)^0.25 (both versions).
ENCODER_DIVISOR = (N**4 * M) ** 0.0625 / 1.15
DECODER_DIVISOR = (12 * M) ** 0.25
ENCODER_ALPHA, DECODER_ALPHA = 0.81 * (N**4 * M) ** 0.0625, (3 * M) ** 0.25
# the paper's Table 1 betas
ENCODER_BETA, DECODER_BETA = 0.87 * (N**4 * M) ** (-1 / 16), (12 * M) ** -0.25


def projections(layer):
    attns = [layer.self_attn] + ([layer.encoder_attn] if getattr(layer, "encoder_attn", None) is not None else [])
    return {
        **{f"{i}.{kind}": getattr(a, kind) for i, a in enumerate(attns) for kind in ("q_proj", "k_proj")},
        **{f"{i}.{kind}": getattr(a, kind) for i, a in enumerate(attns) for kind in ("v_proj", "out_proj")},
        "fc1": layer.fc1,
        "fc2": layer.fc2,
    }


@pytest.mark.parametrize("init_style", ["paper", "fairseq"])
def test_torchscale_divides_the_default_initialisation(tiny_data_bin, init_style):
    """Same seed, same layers: --deepnet-init torchscale = the layer as --init-style built it,
    fc1/fc2/v/out weights and biases divided by torchscale's factor, q/k untouched."""
    common = (*DIMS, "--init-style", init_style)
    default = build(tiny_data_bin, "transformer_postln_wmt_en_de", *common)[0]
    deepnet = build(tiny_data_bin, ARCH, *common, "--deepnet-init", "torchscale")[0]
    for stack, divisor, alpha in (
        ("encoder", ENCODER_DIVISOR, ENCODER_ALPHA),
        ("decoder", DECODER_DIVISOR, DECODER_ALPHA),
    ):
        for plain, layer in zip(getattr(default, stack).layers, getattr(deepnet, stack).layers):
            assert layer.alpha == pytest.approx(alpha)
            for name, proj in projections(layer).items():
                ref = projections(plain)[name]
                factor = 1.0 if name.endswith(("q_proj", "k_proj")) else 1.0 / divisor
                torch.testing.assert_close(proj.weight, ref.weight * factor, msg=f"{stack} {name}")
                torch.testing.assert_close(proj.bias, ref.bias * factor, msg=f"{stack} {name} bias")


def xavier_normal_std(fan_in, fan_out, gain):
    return gain * math.sqrt(2.0 / (fan_in + fan_out))


def test_paper_gains_at_these_depths(tiny_data_bin):
    """--deepnet-init paper (the default): xavier_normal_ gain beta on v/out/fc1/fc2, gain 1 on q/k."""
    model = build(tiny_data_bin, ARCH, *DIMS)[0]
    for stack, beta in (("encoder", ENCODER_BETA), ("decoder", DECODER_BETA)):
        layers = getattr(model, stack).layers
        for kind, gain, fans in (
            ("q_proj", 1.0, (D, D)),
            ("v_proj", beta, (D, D)),
            ("out_proj", beta, (D, D)),
            ("fc1", beta, (D, FFN)),
            ("fc2", beta, (FFN, D)),
        ):
            w = torch.cat(
                [p.weight.detach().flatten() for lay in layers for n, p in projections(lay).items() if n.endswith(kind)]
            )
            assert w.std().item() == pytest.approx(xavier_normal_std(*fans, gain), rel=0.05), (stack, kind)


def test_the_two_versions_differ_as_documented():
    """6L-6L base with torchscale's default init (--init-style fairseq): per-matrix std of
    torchscale / paper, from the formulas alone (docs/fidelity.md quotes 0.46x-1.32x)."""
    n = m = 6
    d, ffn = 512, 2048
    xavier = lambda fi, fo, gain=1.0: gain * math.sqrt(2.0 / (fi + fo))  # noqa: E731
    linear_default = lambda fi: 1.0 / math.sqrt(3.0 * fi)  # noqa: E731  nn.Linear: U(+-1/sqrt(fan_in))
    ratios = []
    for beta, divisor in (
        (0.87 * (n**4 * m) ** (-1 / 16), (n**4 * m) ** 0.0625 / 1.15),
        ((12 * m) ** -0.25, (12 * m) ** 0.25),
    ):
        torchscale = {
            "v": xavier(d, d, 2**-0.5) / divisor,
            "out": xavier(d, d) / divisor,
            "fc1": linear_default(d) / divisor,
            "fc2": linear_default(ffn) / divisor,
        }
        paper = {
            "v": xavier(d, d, beta),
            "out": xavier(d, d, beta),
            "fc1": xavier(d, ffn, beta),
            "fc2": xavier(ffn, d, beta),
        }
        ratios += [torchscale[k] / paper[k] for k in paper]
    assert min(ratios) == pytest.approx(0.46, abs=0.01) and max(ratios) == pytest.approx(1.32, abs=0.01)


def test_pruned_layers_keep_the_alpha_they_were_trained_with(tiny_data_bin):
    """--encoder-layers-to-keep (how --model-overrides prunes a checkpoint): fairseq builds
    the kept count of layers, but each keeps the alpha of the depth it was trained at."""
    full, task, args = build(tiny_data_bin, ARCH, *DIMS)
    args.encoder_layers_to_keep, args.decoder_layers_to_keep = "0,2", "1"  # as --model-overrides sets them
    pruned = task.build_model(args)
    assert len(pruned.encoder.layers) == 2 and len(pruned.decoder.layers) == 1
    assert (
        [lay.alpha for lay in pruned.encoder.layers]
        == [full.encoder.layers[0].alpha] * 2
        == [pytest.approx(ENCODER_ALPHA)] * 2
    )
    assert pruned.decoder.layers[0].alpha == full.decoder.layers[0].alpha == pytest.approx(DECODER_ALPHA)


def test_a_checkpoint_loaded_with_layers_to_keep_keeps_alpha(tiny_data_bin, tmp_path):
    """The same through fairseq's own loading with --model-overrides (fairseq drops every layer
    of a stack without a list: both are given)."""
    from fairseq import checkpoint_utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    model, task, args = build(tiny_data_bin, ARCH, *DIMS)
    path = tmp_path / "checkpoint.pt"
    history = [{"criterion_name": "x", "optimizer_name": "x", "lr_scheduler_state": {}, "num_updates": 0}]
    state = {"model": model.state_dict(), "cfg": convert_namespace_to_omegaconf(args), "optimizer_history": history}
    torch.save({**state, "extra_state": {"train_iterator": None}, "last_optimizer_state": None}, path)
    models, _ = checkpoint_utils.load_model_ensemble(
        [str(path)], arg_overrides={"encoder_layers_to_keep": "1,3", "decoder_layers_to_keep": "0,1"}, task=task
    )
    loaded = models[0]
    assert len(loaded.encoder.layers) == 2
    assert all(lay.alpha == pytest.approx(ENCODER_ALPHA) for lay in loaded.encoder.layers)
    torch.testing.assert_close(loaded.encoder.layers[1].fc1.weight, model.encoder.layers[3].fc1.weight)
