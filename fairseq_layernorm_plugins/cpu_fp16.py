"""fp16 matrix products on a CPU, computed as a GPU computes them.

An fp16 GEMM on a GPU (tensor cores, cuBLAS) reads fp16 inputs, accumulates in fp32 and
rounds the result to fp16; so do fused attention kernels, which keep their softmax in fp32.
A CPU without fp16 arithmetic (x86 before AVX512-FP16 / AMX-FP16) does the same through
generic kernels several times slower than its fp32 ones (``docs/mixed_precision.md``).
:class:`HalfProductsInFloat` runs each such operator on fp16 CPU tensors through the fp32
kernel instead: inputs widened (exact), computed in fp32, results rounded to fp16. The values
agree with the CPU's own fp16 kernels up to the order of accumulation (one fp16 ulp on a few
entries in a thousand); everything else (the fp16 model, activations, gradients, the loss
scale) stays in fp16 as before.

It works at the level of ATen operators (a ``TorchDispatchMode``, below autograd), so it
sees the products inside composite functions (``F.multi_head_attention_forward``) and those
of the backward pass alike.
"""

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack
from torch.utils._pytree import tree_leaves, tree_map

aten = torch.ops.aten

# operator -> the positions of its outputs that are fp16 when its inputs are (None: all)
PRODUCTS = {
    aten.mm.default: None,
    aten.addmm.default: None,
    aten._addmm_activation.default: None,
    aten.bmm.default: None,
    aten.baddbmm.default: None,
    aten.addbmm.default: None,
    aten.mv.default: None,
    aten.addmv.default: None,
    aten.dot.default: None,
    # (output, logsumexp): the logsumexp is fp32 whatever the inputs
    aten._scaled_dot_product_flash_attention_for_cpu.default: (0,),
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: None,
}
FP32_INPUTS = {aten._scaled_dot_product_flash_attention_for_cpu_backward.default}  # its logsumexp


def native_fp16_products():
    """True if this CPU has the fp16 arithmetic torch's fp16 kernels use on x86 (AVX512-FP16 or
    AMX-FP16, as ``torch.cpu.get_capabilities`` reports them): they are then fast and are left
    alone. Elsewhere (other x86 CPUs, other architectures) the mode is used."""
    capabilities = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
    return bool(capabilities.get("avx512_fp16") or capabilities.get("amx_fp16"))


def active():
    """True inside ``with HalfProductsInFloat():``."""
    return any(isinstance(mode, HalfProductsInFloat) for mode in _get_current_dispatch_mode_stack())


def _half_on_cpu(func, tree):
    """True if the floating tensors in ``tree`` (``func``'s arguments) are all fp16 (but the fp32
    logsumexp the attention backward reads) and on the CPU. Mixed fp16 / fp32 operands are left
    to torch, which refuses them."""
    tensors = [leaf for leaf in tree_leaves(tree) if isinstance(leaf, torch.Tensor)]
    floating = [t.dtype for t in tensors if t.is_floating_point()]
    allowed = {torch.float16, torch.float32} if func in FP32_INPUTS else {torch.float16}
    return torch.float16 in floating and set(floating) <= allowed and all(t.device.type == "cpu" for t in tensors)


def _widen(value):
    return value.float() if isinstance(value, torch.Tensor) and value.dtype == torch.float16 else value


def _narrow(value):
    return value.half() if isinstance(value, torch.Tensor) and value.dtype == torch.float32 else value


class HalfProductsInFloat(TorchDispatchMode):
    """Inside ``with HalfProductsInFloat():`` every operator of :data:`PRODUCTS` called on
    fp16 CPU tensors (forward or backward) computes in fp32 and returns its fp16 outputs
    rounded from fp32; any other operator, and any product of other tensors, runs as it would
    without the mode."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in PRODUCTS or not _half_on_cpu(func, (args, kwargs)):
            return func(*args, **kwargs)
        out = func(*tree_map(_widen, args), **tree_map(_widen, kwargs))
        half = PRODUCTS[func]
        if half is None:
            return tree_map(_narrow, out)
        return tuple(_narrow(value) if i in half else value for i, value in enumerate(out))
