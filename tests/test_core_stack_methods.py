"""The stack-level methods in the core (``layernorm_methods``): DLCL (its own stack loop over
the layer history) and ResiDual (a dual stream shared by a stack's layers). Their core models
compute what their fairseq archs compute on the fairseq models' weights, and each core stack
follows its method's rule, recomputed here from what the layers computed (forward hooks)."""

import pytest
import torch
import torch.nn.functional as F
from helpers.core_equality import assert_same

from layernorm_methods import build_language_model, build_model
from layernorm_methods.methods.dlcl import DLCLDecoder, DLCLEncoder, LayerHistory

SIZES = dict(embed_dim=16, ffn_embed_dim=32, attention_heads=2, dropout=0.0)
SRC = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 11, 2, 1]])  # padding_idx 1
PREV = torch.tensor([[2, 5, 6, 7], [2, 9, 10, 1]])
RESIDUAL_OPTIONS = ("--residual-dual-scale", "0.05", "--residual-alpha", "0.5")


@pytest.mark.parametrize(
    "method, flags",
    [
        ("dlcl", ()),
        ("dlcl_postnorm", ()),
        ("dlcl", ("--norm-type", "rmsnorm")),  # LN_1..LN_L and LN_final as RMSNorm
        ("residual", ()),
        ("residual", RESIDUAL_OPTIONS),
        ("residual", ("--norm-type", "rmsnorm")),  # the output norm RMSNorm, eps 1e-7
    ],
)
def test_translation_models_match(tiny_data_bin, method, flags):
    assert_same(tiny_data_bin, method, "translation", *flags)


@pytest.mark.parametrize(
    "method, flags", [("dlcl", ()), ("dlcl_postnorm", ()), ("residual", ()), ("residual", RESIDUAL_OPTIONS)]
)
def test_language_models_match(lm_data_bin, method, flags):
    assert_same(lm_data_bin, method, "lm", *flags)


def perturbed(model, seed=0):
    """``model`` in eval mode with every weight off its initial value (LayerNorm gains, W)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator))
    return model.eval()


def record(module, store, key, pre=False):
    """A forward hook on ``module`` appending its output (``pre``: its first input) to ``store[key]``."""
    if pre:
        return module.register_forward_pre_hook(lambda m, args: store.setdefault(key, []).append(args[0]))
    return module.register_forward_hook(lambda m, args, out: store.setdefault(key, []).append(out))


def layer_norm(norm, x, eps):
    """LayerNorm with ``norm``'s gain and bias, from F.layer_norm at ``eps``."""
    return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, eps)


def test_dlcl_history_starts_as_the_average_of_every_earlier_output():
    """W (L+1, L+1) at initialisation (Wang et al. 2019; wangqiangneu/dlcl ``--init-value avg``,
    ``--weight-type scalar``): W[l, k] = 1/(l+1) for k <= l, 0 above; one learnable scalar per
    entry; one new LayerNorm per layer output, in both stacks of both variants."""
    for method in ("dlcl", "dlcl_postnorm"):
        model = build_model(method, 40, encoder_layers=4, decoder_layers=3, **SIZES)
        assert isinstance(model.encoder, DLCLEncoder) and isinstance(model.decoder, DLCLDecoder)
        for stack, layers in ((model.encoder, 4), (model.decoder, 3)):
            history = stack.dlcl
            assert isinstance(history, LayerHistory) and history.post_norm is (method == "dlcl_postnorm")
            rows = range(layers + 1)  # W[row, k] = 1/(row+1) for k <= row
            expected = torch.tensor([[1 / (row + 1) if k <= row else 0.0 for k in rows] for row in rows])
            torch.testing.assert_close(history.weights.detach(), expected)
            assert history.weights.requires_grad and len(history.layer_norms) == layers
            assert (stack.layer_norm.final_norm is None) is (method == "dlcl_postnorm")


@pytest.mark.parametrize("method", ["dlcl", "dlcl_postnorm"])
def test_dlcl_core_stack_feeds_each_layer_the_learned_sum(method):
    """Pre-norm: x_{l+1} = sum_{k<=l} W[l, k] LN_k(y_k), output LN_final(sum_k W[L, k] LN_k(y_k));
    post-norm: x_{l+1} = LN_l(sum_{k<=l} W[l, k] y_k), output LN_L(...); LN_0 the identity, y_0
    the embedding: each layer's input and the stack's output recomputed from the layers' outputs."""
    model = perturbed(build_model(method, 40, encoder_layers=3, decoder_layers=2, **SIZES))
    seen = {}
    for name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        for layer in stack.layers:
            record(layer, seen, (name, "in"), pre=True)
            record(layer, seen, (name, "out"))
        record(stack.layer_norm, seen, (name, "top"))
    with torch.no_grad():
        model(SRC, PREV)
        for name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
            inputs, outputs = seen[(name, "in")], seen[(name, "out")]
            W, norms = stack.dlcl.weights, stack.dlcl.layer_norms
            embedded = stack.embed(SRC if name == "encoder" else PREV)
            if name == "encoder":  # the padded positions' inputs zeroed
                embedded = embedded * SRC.eq(1).t().unsqueeze(-1).logical_not()
            ys = [embedded] + outputs  # y_0..y_L
            for row in range(len(ys)):
                if method == "dlcl":
                    terms = [ys[0]] + [layer_norm(norms[k - 1], ys[k], 1e-5) for k in range(1, row + 1)]
                    x = sum(W[row, k] * terms[k] for k in range(row + 1))
                else:
                    x = sum(W[row, k] * ys[k] for k in range(row + 1))
                    x = x if row == 0 else layer_norm(norms[row - 1], x, 1e-5)
                if row < len(outputs):
                    torch.testing.assert_close(inputs[row], x, msg=f"{method} {name} layer {row + 1}")
            final = stack.layer_norm.final_norm
            expected = x if final is None else layer_norm(final, x, 1e-5)
            torch.testing.assert_close(seen[(name, "top")][0], expected, msg=f"{method} {name} output")


def residual_expected(stack, seen, scale, alpha):
    """alpha * x_L + LN(s * (x_0 + sum of every branch output)), from what the hooks saw."""
    x0, xL = seen["x0"][0], seen["xL"][-1]
    dual = scale * (x0 + sum(seen["branches"]))
    return alpha * xL + layer_norm(stack.layer_norm.norm, dual, 1e-7)


@pytest.mark.parametrize("scale, alpha", [(1.0, 1.0), (0.05, 0.5)])
def test_residual_core_stack_output_is_alpha_x_plus_ln_of_the_dual_sum(scale, alpha):
    """ResiDual (Xie et al. 2023): each stack's output is alpha * x_L + LN(s * (x_0 + sum_i f_i))
    over every sub-layer i of the stack (self-attention, encoder attention, FFN), LN with eps
    1e-7: the encoder's and decoder's of a translation model and a language model's decoder."""
    options = dict(residual_dual_scale=scale, residual_alpha=alpha, **SIZES)
    translation = perturbed(build_model("residual", 40, encoder_layers=3, decoder_layers=2, **options))
    lm = perturbed(build_language_model("residual", 40, layers=2, **options))
    for stacks, run in (
        ((translation.encoder, translation.decoder), lambda: translation(SRC, PREV)),
        ((lm.decoder,), lambda: lm(SRC)),
    ):
        seen = [{} for _ in stacks]
        for stack, store in zip(stacks, seen):
            record(stack.layers[0], store, "x0", pre=True)
            record(stack.layers[-1], store, "xL")
            record(stack.layer_norm, store, "top")
            for layer in stack.layers:
                branches = [
                    layer.self_attn,
                    getattr(layer, "encoder_attn", None),
                    layer.fc2,
                ]  # dropout 0: f_i as the module gave it
                for branch in branches:
                    if branch is not None:
                        record(branch, store, "branches")
        with torch.no_grad():
            run()
        for stack, store in zip(stacks, seen):
            assert len(store["branches"]) == len(stack.layers) * (
                2 if getattr(stack.layers[0], "encoder_attn", None) is None else 3
            )
            torch.testing.assert_close(store["top"][0], residual_expected(stack, store, scale, alpha))
            assert stack.layer_norm.stream.total is None  # nothing kept between passes
