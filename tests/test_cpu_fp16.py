"""``cpu_fp16.HalfProductsInFloat``: fp16 matrix products on a CPU computed from the fp16
inputs in fp32 and rounded to fp16, forward and backward; nothing else changed. Its wiring
into fairseq's fp16 steps (``_compat.fp16_cpu_products``): tests/test_mixed_precision.py."""

import contextlib

import pytest
import torch
import torch.nn.functional as F

from fairseq_layernorm_plugins import cpu_fp16
from fairseq_layernorm_plugins.cpu_fp16 import HalfProductsInFloat, active

aten = torch.ops.aten


class Recording(HalfProductsInFloat):
    """The mode, also recording each operator it computes in fp32 (``.ops``)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in cpu_fp16.PRODUCTS and cpu_fp16._half_on_cpu(func, (args, kwargs or {})):
            self.ops.append(func)
        return super().__torch_dispatch__(func, types, args, kwargs)


def operands(*shapes, dtype=torch.float16, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=generator).to(dtype) for shape in shapes]


PRODUCTS = {  # name -> (the call, its operands' shapes, the operator it reaches)
    "linear": (lambda x, w, b: F.linear(x, w, b), ((7, 96), (40, 96), (40,)), aten.addmm),
    "linear 3d, no bias": (lambda x, w: F.linear(x, w), ((2, 7, 96), (40, 96)), aten.mm),
    "mm": (torch.mm, ((33, 96), (96, 20)), aten.mm),
    "addmm": (torch.addmm, ((33, 20), (33, 96), (96, 20)), aten.addmm),
    "addmm + relu": (
        lambda c, a, b: torch._addmm_activation(c, a, b),
        ((33, 20), (33, 96), (96, 20)),
        aten._addmm_activation,
    ),
    "bmm": (torch.bmm, ((3, 17, 96), (3, 96, 11)), aten.bmm),
    "baddbmm": (
        lambda c, a, b: torch.baddbmm(c, a, b, alpha=0.5),
        ((3, 17, 11), (3, 17, 96), (3, 96, 11)),
        aten.baddbmm,
    ),
    "addbmm": (torch.addbmm, ((17, 11), (3, 17, 96), (3, 96, 11)), aten.addbmm),
    "matmul 3d @ 2d": (lambda a, b: a @ b, ((4, 9, 96), (96, 12)), aten.mm),
    "einsum": (lambda a, b: torch.einsum("bik,bkj->bij", a, b), ((2, 9, 96), (2, 96, 5)), aten.bmm),
    "mv": (torch.mv, ((33, 96), (96,)), aten.mv),
    "addmv": (torch.addmv, ((33,), (33, 96), (96,)), aten.addmv),
    "dot": (torch.dot, ((96,), (96,)), aten.dot),
}


@pytest.mark.parametrize("name", PRODUCTS)
def test_a_product_of_half_cpu_tensors_is_the_fp32_product_rounded(name):
    """Inside the mode: the operator itself is computed in fp32 and its result is exactly the
    fp32 product of the widened operands, rounded to fp16. Outside, torch's own fp16 kernel
    also accumulates in fp32: the two agree up to the order of accumulation (a few fp16 ulps)."""
    call, shapes, operator = PRODUCTS[name]
    args = operands(*shapes)
    with Recording() as mode:
        inside = call(*args)
    assert operator.default in mode.ops
    assert inside.dtype == torch.float16
    assert torch.equal(inside, call(*(a.float() for a in args)).half())
    native = call(*args)
    assert torch.allclose(inside.float(), native.float(), rtol=4 * 2**-10, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_other_dtypes_and_other_operators_are_left_alone(dtype):
    """fp32 / bf16 / fp64 products, fp16 operators that are not products, and products of
    fp16 with fp32 operands (which torch refuses) get what they get without the mode."""
    x, w = operands((9, 96), (24, 96), dtype=dtype)
    h = operands((9, 24))[0]
    with Recording() as mode:
        product, softmax, layer_norm = F.linear(x, w), torch.softmax(h, -1), F.layer_norm(h, (24,))
        with pytest.raises(RuntimeError, match="same dtype"):
            torch.mm(h, torch.ones(24, 5))
    assert mode.ops == []
    assert product.dtype == dtype and torch.equal(product, F.linear(x, w))
    assert torch.equal(softmax, torch.softmax(h, -1)) and torch.equal(layer_norm, F.layer_norm(h, (24,)))


def gradients(call, leaves, upstream, mode=None):
    """(output, gradients of the leaves) of ``call``, inside ``mode`` if given."""
    with mode or contextlib.nullcontext():
        out = call(*leaves)
        return out, torch.autograd.grad(out, leaves, upstream)


def test_the_backward_products_are_computed_the_same_way():
    """A linear layer's gradients through the mode equal those of the written-out graph
    (widen, fp32 product, round) bit for bit, and stay fp16; the backward pass's own products
    (input and weight gradients) are computed by the mode, even for a forward pass made
    without it."""
    leaves = [a.requires_grad_() for a in operands((7, 96), (40, 96), (40,))]
    upstream = operands((7, 40), seed=1)[0]
    out, grads = gradients(F.linear, leaves, upstream, HalfProductsInFloat())
    written_out = lambda x, w, b: F.linear(x.float(), w.float(), b.float()).half()  # noqa: E731
    want_out, want = gradients(written_out, leaves, upstream)
    assert out.dtype == torch.float16 and torch.equal(out, want_out)
    assert all(g.dtype == torch.float16 and torch.equal(g, w) for g, w in zip(grads, want))
    native_forward = F.linear(*leaves)
    with Recording() as mode:
        torch.autograd.grad(native_forward, leaves, upstream)
    assert mode.ops.count(aten.mm.default) == 2  # grad input = g W, grad weight = g^T x


def test_fused_attention_keeps_its_fp32_logsumexp():
    """``scaled_dot_product_attention`` (fairseq's fast path, --fused-attention): the output is
    the fp32 kernel's rounded to fp16; its backward, which reads that fp16 output and the fp32
    logsumexp (left unrounded), gives fp16 gradients within a few ulps of torch's fp16 kernel."""
    attention = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    leaves = [a.requires_grad_() for a in operands(*[(2, 4, 13, 16)] * 3)]
    upstream = operands((2, 4, 13, 16), seed=1)[0]
    out, grads = gradients(attention, leaves, upstream, HalfProductsInFloat())
    native_out, native = gradients(attention, leaves, upstream)
    assert out.dtype == torch.float16 and torch.equal(out, attention(*(t.float() for t in leaves)).half())
    for grad, want in zip(grads, native):
        assert grad.dtype == torch.float16
        assert torch.allclose(grad.float(), want.float(), rtol=8 * 2**-10, atol=2e-3)
    with Recording() as mode:
        torch.autograd.grad(attention(*leaves), leaves, upstream)
    assert mode.ops == [aten._scaled_dot_product_flash_attention_for_cpu.default] + [
        aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    ]
    kernel = aten._scaled_dot_product_flash_attention_for_cpu
    with HalfProductsInFloat():
        half_out, logsumexp = kernel(*(t.detach() for t in leaves), 0.0, True)
    fp32_out, fp32_logsumexp = kernel(*(t.detach().float() for t in leaves), 0.0, True)
    assert half_out.dtype == torch.float16 and torch.equal(half_out, fp32_out.half())
    assert logsumexp.dtype == torch.float32 and torch.equal(logsumexp, fp32_logsumexp)


def test_active_says_whether_the_mode_is_on():
    assert not active()
    with HalfProductsInFloat():
        assert active()
    assert not active()


def test_native_fp16_products_reads_the_cpu_capabilities(monkeypatch):
    """torch's own kernels are kept exactly where the CPU reports AVX512-FP16 or AMX-FP16."""
    capabilities = torch.cpu.get_capabilities()
    assert cpu_fp16.native_fp16_products() == bool(capabilities.get("avx512_fp16") or capabilities.get("amx_fp16"))
    for flags, native in (({}, False), ({"avx512_fp16": True}, True), ({"amx_fp16": True}, True)):
        monkeypatch.setattr(torch.cpu, "get_capabilities", lambda flags=flags: {"avx512_fp16": False} | flags)
        assert cpu_fp16.native_fp16_products() == native
