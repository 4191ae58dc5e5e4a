"""Decoder-only language models of every method (``transformer_lm_<method>``, fairseq's
``language_modeling`` task): where the LayerNorms sit, each method's constants for a
decoder-only stack re-computed here, and every registered one trained, resumed, scored by
``fairseq-eval-lm`` and sampled by ``fairseq-interactive`` on a tiny corpus."""

import math
import re

import pytest
import torch
from conftest import LM_WORDS, PLUGIN_DIR, build, hand_set_layer_norms, json_records, parse, plugin_archs, run_cli

from fairseq_layernorm_plugins.methods import METHODS

LM_ARCHS = plugin_archs("lm")
LM_FAMILIES = sorted(set(LM_ARCHS.values()))  # one per method: its base arch has the model's name
TINY_LM = ["--task", "language_modeling", "--tokens-per-sample", "32", "--decoder-layers", "2"]
TINY_LM += ["--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2"]


def build_lm(data_bin, arch, *flags, seed=1):
    model, task, args = build(data_bin, arch, *TINY_LM, *flags, seed=seed)
    return model.eval(), task, args


def causal_mask(t):
    return torch.triu(torch.full((t, t), float("-inf")), 1)


def self_attention(layer, h):
    return layer.self_attn(h, h, h, attn_mask=causal_mask(h.shape[0]), need_weights=False)[0]


def ffn(layer, x):
    return layer.fc2(torch.relu(layer.fc1(x)))


def test_every_method_registers_a_language_model_of_every_size():
    from fairseq_layernorm_plugins.models.base_lm import LM_ARCH_SIZES

    assert {METHODS[name].lm_model for name in METHODS} == set(LM_FAMILIES)
    for family in LM_FAMILIES:
        assert {family + size for size in LM_ARCH_SIZES} <= set(LM_ARCHS)


@pytest.mark.parametrize("family", LM_FAMILIES)
def test_where_the_layer_norms_sit(lm_data_bin, family):
    """Every size keeps the method's placement, though fairseq's own ``transformer_lm_*`` force
    Pre-LN: the Post-LN family normalises after each residual and has no normalisation before
    the output; the Pre-LN family normalises first and ends with its final one (fairseq's
    wiki103 size drops it); T-Fixup and ReZero have none at all."""
    from fairseq_layernorm_plugins.models.base_lm import LM_FAMILIES as FAMILIES
    from layernorm_methods.norms import DynamicTanh

    post_ln = FAMILIES[family].normalize_before is False
    for size in ("", "_wiki103", "_gpt2_small"):
        args = parse(lm_data_bin, family + size, "--task", "language_modeling")
        assert args.decoder_normalize_before is not post_ln, size
        if not post_ln:
            assert args.no_decoder_final_norm is False, size
    assert parse(lm_data_bin, "transformer_lm_wiki103", "--task", "language_modeling").decoder_normalize_before
    model, _, _ = build_lm(lm_data_bin, family)
    layer = model.decoder.layers[0]
    assert layer.encoder_attn is None
    if family == "transformer_lm_residual":  # the output joins the two streams: x_L + LN(d_L)
        assert type(model.decoder.layer_norm).__name__ == "DualOutput"
    elif family.startswith("transformer_lm_dlcl"):  # the output combines the history, then its final norm if any
        assert (model.decoder.layer_norm.final_norm is None) is post_ln
    else:
        assert (model.decoder.layer_norm is None) is post_ln
    norms = (torch.nn.LayerNorm, DynamicTanh)
    has_norms = family not in ("transformer_lm_tfixup", "transformer_lm_rezero")
    assert any(isinstance(m, norms) for m in model.decoder.layers.modules()) is has_norms


def test_preln_lm_as_the_b2t_authors_ran_it(lm_data_bin):
    """``--no-decoder-final-norm`` (``configs/wikitext103/preln.yaml``): Pre-LN layers, nothing
    between the last one and the output; without it the final LayerNorm is there."""
    model, _, _ = build_lm(lm_data_bin, "transformer_lm_preln", "--no-decoder-final-norm")
    assert model.decoder.layer_norm is None
    assert all(layer.normalize_before for layer in model.decoder.layers)
    assert isinstance(build_lm(lm_data_bin, "transformer_lm_preln")[0].decoder.layer_norm, torch.nn.LayerNorm)


def test_post_ln_flags_are_refused(lm_data_bin):
    with pytest.raises(ValueError, match="the method is Post-LN"):
        build_lm(lm_data_bin, "transformer_lm_b2t", "--decoder-normalize-before")


def test_post_ln_layer_is_ln_after_each_residual(lm_data_bin):
    """x1 = LN(x + SelfAttn(x)), out = LN(x1 + FFN(x1)), causal self-attention."""
    model, _, _ = build_lm(lm_data_bin, "transformer_lm_postln")
    layer = hand_set_layer_norms(model).decoder.layers[0]
    x = torch.randn(7, 3, 32)
    with torch.no_grad():
        x1 = layer.self_attn_layer_norm(x + self_attention(layer, x))
        expected = layer.final_layer_norm(x1 + ffn(layer, x1))
        out = layer(x, self_attn_mask=causal_mask(7))[0]
    torch.testing.assert_close(out, expected)


def test_b2t_layer_adds_its_input_before_the_last_layer_norm(lm_data_bin):
    """B2T Eq. 5 in a decoder-only layer: h = LN(x + SelfAttn(x)), out = LN(x + h + FFN(h))."""
    model, _, _ = build_lm(lm_data_bin, "transformer_lm_b2t")
    layer = hand_set_layer_norms(model).decoder.layers[0]
    x = torch.randn(7, 3, 32)
    with torch.no_grad():
        h = layer.self_attn_layer_norm(x + self_attention(layer, x))
        expected = layer.final_layer_norm(x + h + ffn(layer, h))
        out = layer(x, self_attn_mask=causal_mask(7))[0]
    torch.testing.assert_close(out, expected)


def as_fairseq_train_builds(data_bin, arch, *flags, seed):
    """The model fairseq-train builds: from the omegaconf config its args become (a dataclass
    model such as stock ``transformer_lm`` gets its dataclass defaults there)."""
    from fairseq import tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    cfg = convert_namespace_to_omegaconf(parse(data_bin, arch, *TINY_LM, *flags))
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(seed)
    return task.build_model(cfg.model)


@pytest.mark.parametrize(
    ("family", "stock_flags"), [("transformer_lm_postln", []), ("transformer_lm_preln", ["--decoder-normalize-before"])]
)
def test_with_fairseqs_initialisation_it_is_fairseqs_transformer_lm(lm_data_bin, family, stock_flags):
    """With ``--init-style fairseq``, Post-LN is stock ``--arch transformer_lm`` as fairseq-train
    builds it (its dataclass defaults: Post-LN, no final LayerNorm; only the named
    ``transformer_lm_*`` archs force Pre-LN) and Pre-LN is it with ``--decoder-normalize-before``,
    module for module and parameter for parameter."""
    # fairseq's dataclass default for the input/output dims is 512 whatever the width: say 32
    dims = ["--decoder-input-dim", "32", "--decoder-output-dim", "32"]
    ours = as_fairseq_train_builds(lm_data_bin, family, "--init-style", "fairseq", *dims, seed=3)
    stock = as_fairseq_train_builds(lm_data_bin, "transformer_lm", *stock_flags, *dims, seed=3)
    assert (ours.decoder.layer_norm is None) is (family == "transformer_lm_postln")
    renamed = {"PluginLanguageModelDecoder": "TransformerDecoder", "PluginDecoderLayer": "TransformerDecoderLayerBase"}
    assert [(n, renamed.get(type(m).__name__, type(m).__name__)) for n, m in ours.named_modules()][1:] == [
        (n, type(m).__name__) for n, m in stock.named_modules()
    ][1:]
    assert [layer.normalize_before for layer in ours.decoder.layers] == [
        layer.normalize_before for layer in stock.decoder.layers
    ]
    theirs = stock.state_dict()
    assert ours.state_dict().keys() == theirs.keys()
    for key, value in ours.state_dict().items():
        torch.testing.assert_close(value, theirs[key], rtol=0, atol=0, msg=key)


@pytest.mark.parametrize("layers", [2, 4])
def test_deepnet_constants_of_a_decoder_only_stack(lm_data_bin, layers):
    """alpha = (2M)^(1/4) on every residual, v/out/fc1/fc2 Xavier-normal at gain beta = (8M)^(-1/4)
    (DeepNet Table 1, decoder-only; torchscale)."""
    model, _, _ = build_lm(lm_data_bin, "transformer_lm_deepnet", "--decoder-layers", layers, seed=5)
    alpha, beta = (2 * layers) ** 0.25, (8 * layers) ** -0.25
    assert all(layer.alpha == pytest.approx(alpha) for layer in model.decoder.layers)
    fc1 = model.decoder.layers[0].fc1.weight  # (64, 32): Xavier-normal std = gain * sqrt(2 / (fan_in + fan_out))
    assert fc1.std().item() == pytest.approx(beta * math.sqrt(2 / 96), rel=0.1)


def test_tfixup_scales_a_decoder_only_stack_by_6m_to_the_minus_quarter(lm_data_bin):
    """Layer 0 draws the same numbers at any depth (same seed, built first), so its weights at
    M = 4 over those at M = 2 are (6*2 / 6*4)^(1/4); the embedding the same."""
    shallow, _, _ = build_lm(lm_data_bin, "transformer_lm_tfixup", "--decoder-layers", 2, seed=9)
    deep, _, _ = build_lm(lm_data_bin, "transformer_lm_tfixup", "--decoder-layers", 4, seed=9)
    ratio = (12 / 24) ** 0.25
    a, b = shallow.decoder.layers[0], deep.decoder.layers[0]
    for name in ("fc1", "fc2"):
        torch.testing.assert_close(getattr(b, name).weight, getattr(a, name).weight * ratio)
    for name in ("v_proj", "out_proj"):
        torch.testing.assert_close(getattr(b.self_attn, name).weight, getattr(a.self_attn, name).weight * ratio)
    torch.testing.assert_close(b.self_attn.q_proj.weight, a.self_attn.q_proj.weight)  # q/k as initialised
    torch.testing.assert_close(deep.decoder.embed_tokens.weight, shallow.decoder.embed_tokens.weight * ratio)
    assert shallow.decoder.embed_tokens.weight.std().item() == pytest.approx(
        32**-0.5 * 12**-0.25, rel=0.1
    )  # N(0, d^-1/2) x (6M)^-1/4


def test_admin_closed_form_counts_the_stacks_2m_sublayers(lm_data_bin):
    """admin-torch's O(log n) omega with n = 2M residual sub-layers: sqrt((n+1)/ln(n+1) - 1)."""
    model, _, _ = build_lm(lm_data_bin, "transformer_lm_admin", "--decoder-layers", 3, "--admin-init", "closed-logn")
    n = 6
    expected = math.sqrt((n + 1) / math.log(n + 1) - 1)
    assert list(model.admin_layers()) == ["decoder"]
    for layer in model.decoder.layers:
        assert layer.omega.shape == (2, 32)
        torch.testing.assert_close(layer.omega, torch.full((2, 32), expected))


TRAIN = ["--optimizer", "adam", "--lr", "3e-3", "--max-tokens", "256", "--cpu", "--num-workers", "0"]
TRAIN += ["--log-format", "json", "--log-interval", "1", "--no-progress-bar", "--seed", "1", "--dropout", "0"]


@pytest.mark.slow(3)
@pytest.mark.parametrize("family", LM_FAMILIES)
def test_trains_resumes_scores_and_samples(lm_data_bin, tmp_path, family):
    """fairseq-train (Admin profiles its first batch), a resume that goes on from its
    checkpoint, fairseq-eval-lm's perplexity below the vocabulary size, and sampling. Every
    command runs through its own ``cli_main`` in this process (fairseq-train's per-run state
    reset first, ``run_cli``): bit-for-bit resumes in a fresh ``fairseq-train`` process are
    test_cli_e2e.py's."""
    common = [lm_data_bin, "--arch", family, "--user-dir", PLUGIN_DIR, *TINY_LM, *TRAIN, "--save-dir", tmp_path]
    log = run_cli("fairseq-train", *common, "--max-update", "30", "--no-epoch-checkpoints", in_process=True)
    losses = [float(r["loss"]) for r in json_records(log, "train_inner")]
    assert len(losses) == 30 and all(map(math.isfinite, losses))
    assert sum(losses[-5:]) < sum(losses[:5])
    assert ("Admin: profiled 1 batch" in log) is (family == "transformer_lm_admin")
    resumed = run_cli("fairseq-train", *common, "--max-update", "34", "--no-epoch-checkpoints", in_process=True)
    assert "checkpoint_last.pt (epoch" in resumed and "@ 30 updates)" in resumed
    assert [r["num_updates"] for r in json_records(resumed, "train_inner")] == ["31", "32", "33", "34"]

    scored = run_cli(
        "fairseq-eval-lm",
        lm_data_bin,
        *("--path", tmp_path / "checkpoint_last.pt", "--user-dir", PLUGIN_DIR, "--cpu", "--gen-subset", "test"),
        *("--tokens-per-sample", "32", "--context-window", "16", "--max-tokens", "512"),
    )
    perplexity = float(re.search(r"Perplexity: ([0-9.]+)", scored)[1])
    assert 1 < perplexity < len(LM_WORDS)  # better than uniform over the words

    sampled = run_cli(
        "fairseq-interactive",
        lm_data_bin,
        *("--task", "language_modeling", "--path", tmp_path / "checkpoint_last.pt", "--user-dir", PLUGIN_DIR),
        *("--cpu", "--sampling", "--beam", "1", "--max-len-b", "8", "--seed", "1"),
        input_text="the a one\n",
    )
    hypothesis = next(line for line in sampled.splitlines() if line.startswith("H-0"))
    assert all(word in LM_WORDS for word in hypothesis.split("\t")[-1].split())


def test_mixed_precision_and_fused_attention(lm_data_bin, tmp_path):
    """A Post-LN language model trains in fp16 on the CPU (``_compat``) with ``--fused-attention``
    (fairseq-train's ``cli_main`` in this process)."""
    log = run_cli(
        "fairseq-train",
        *(lm_data_bin, "--arch", "transformer_lm_postln", "--user-dir", PLUGIN_DIR, *TINY_LM, *TRAIN),
        *("--save-dir", tmp_path, "--max-update", "6", "--fp16", "--fp16-no-flatten-grads", "--fused-attention"),
        in_process=True,
    )
    records = json_records(log, "train_inner")
    assert len(records) == 6 and all(math.isfinite(float(r["loss"])) and "loss_scale" in r for r in records)
