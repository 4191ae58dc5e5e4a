"""One fairseq plugin model and the core model of the same method holding its weights, both
in float64, and their outputs on one real batch, for the per-method equality tests
(``tests/test_core_*.py``)."""

import torch
from conftest import TINY_MODEL, batch, build

from layernorm_methods import EncoderDecoderModel, LanguageModel, load_fairseq_state_dict
from layernorm_methods.transfer import configure_like

TINY_LM = ["--task", "language_modeling", "--tokens-per-sample", "32", "--decoder-embed-dim", "32"]
TINY_LM += ["--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2"]
DEPTHS = ((2, 3), (3, 1))  # (encoder, decoder) layers: two depths, unequal stacks
# train mode with the same dropout masks: dropout and activation dropout on, attention dropout off
# (torch's fused attention draws its own mask)
DROPOUT = ["--dropout", "0.2", "--activation-dropout", "0.1", "--attention-dropout", "0.0"]


def twins(data_bin, method, kind, depth, *flags):
    """(fairseq model, core model with its weights, the fairseq task) for ``method`` of ``kind``
    (``translation`` or ``lm``) at ``depth`` (encoder layers, decoder layers), float64."""
    from fairseq_layernorm_plugins.methods import METHODS

    chosen = METHODS[method]
    if kind == "lm":
        arch, dims = chosen.lm_arch(), [*TINY_LM, "--decoder-layers", str(depth[1])]
    else:
        arch, dims = chosen.arch(), [*TINY_MODEL, "--encoder-layers", str(depth[0]), "--decoder-layers", str(depth[1])]
    model, task, args = build(data_bin, arch, *dims, *flags)
    with torch.no_grad():  # every weight off its initial value: zero-initialised gates, unit omegas and
        for p in model.parameters():  # LayerNorm gains would hide a weight the core uses differently
            p.add_(torch.randn_like(p) * 0.05)
    cfg = configure_like(method, args, kind)
    padding_idx = task.source_dictionary.pad()
    if kind == "lm":
        core = LanguageModel(cfg, len(task.source_dictionary), padding_idx)
    else:
        core = EncoderDecoderModel(cfg, len(task.source_dictionary), len(task.target_dictionary), padding_idx)
    load_fairseq_state_dict(core, model.state_dict())
    return model.double(), core.double(), task


def outputs(model, core, task, kind, train=False, seed=3):
    """Both models' logits on one batch of the validation set (padded), in eval mode or in train
    mode from the same random state (so the same dropout masks)."""
    if kind == "lm":
        task.load_dataset("valid")
        dataset = task.dataset("valid")
        net_input = dataset.collater([dataset[i] for i in range(4)])["net_input"]
        core_args = (net_input["src_tokens"],)
    else:
        net_input = batch(task)["net_input"]
        core_args = (net_input["src_tokens"], net_input["prev_output_tokens"])
    results = []
    for run, call in ((model, lambda: model(**net_input)[0]), (core, lambda: core(*core_args))):
        run.train(train)
        torch.manual_seed(seed)
        results.append(call())
    return results


def assert_same(data_bin, method, kind, *flags, atol=1e-6):
    """The core model equals the fairseq model on transferred weights, eval and train mode, at both
    depths. ``atol``: fairseq's own attention path (encoder-decoder attention) takes its softmax in
    float32 whatever the model's precision (``fairseq.utils.softmax``), about 1e-7 here; a wrong
    formula differs by orders of magnitude more."""
    for depth in DEPTHS:
        model, core, task = twins(data_bin, method, kind, depth, *DROPOUT, *flags)
        for train in (False, True):
            ours, theirs = outputs(model, core, task, kind, train)
            assert ours.shape == theirs.shape
            gap = (ours - theirs).abs().max().item()
            assert gap < atol, f"{method} {kind} {depth} train={train}: max difference {gap:.3g}"
