"""Residual-branch helpers shared by the methods' layers.

The layers (the core's and fairseq's, which the core's mirror) call
``residual_connection(x, residual)`` once per sub-layer
(encoder: self-attn, FFN; decoder: self-attn, cross-attn, FFN) with the branch
output ``x`` and the sub-layer input ``residual``, but do not say which sub-layer
it is. :class:`SublayerResidualMixin` numbers those calls within one pass through
the layer and keeps the layer's input, which is what per-sub-layer methods need
(B2T adds the layer input at the last sub-layer; Admin has one omega per sub-layer).

The fairseq plugin's layers keep fairseq's own ``forward``, so they script like fairseq's transformer
(TorchScript compiles neither ``super().forward`` nor ``*args``): the count wraps
after the last sub-layer, and at sub-layer 1 ``residual`` is the layer's input (fairseq
sets ``residual = x`` first). In eager mode a forward pre-hook also restarts the count
at every call, so a pass cut short by an exception (fairseq's out-of-memory recovery)
leaves nothing behind; TorchScript cannot compile that hook (fairseq passes the layers
keyword arguments), so scripting removes it and a scripted layer counts by the wrap alone.
"""

from typing import Optional

import torch.nn as nn
from torch import Tensor


def restart_sublayers(layer, inputs):
    """Forward pre-hook (eager only): a call starts at sub-layer 0."""
    layer.sublayer = 0


class SublayerResidualMixin:
    """Mix in before a layer class (the core's ``EncoderLayer`` / ``DecoderLayer``, the plugin's
    ``PluginEncoderLayer`` / ``PluginDecoderLayer``); override :meth:`combine`.

    During a pass: ``self.layer_input`` is the layer's input x (T, B, C) and
    ``combine(x, residual, i)`` is called for sub-layer i = 1..``num_sublayers``.
    """

    num_sublayers: int
    sublayer: int
    layer_input: Optional[Tensor]  # evaluated at class creation (and by TorchScript): not `Tensor | None` on 3.9

    def method_init_(self, cfg, stack):
        self.num_sublayers = 3 if getattr(self, "encoder_attn", None) is not None else 2
        self.sublayer = 0
        self.layer_input = None
        self.register_forward_pre_hook(restart_sublayers)
        super().method_init_(cfg, stack)

    def __prepare_scriptable__(self):
        """Called by ``torch.jit.script``: drop the eager-only pre-hook (see the module docstring)."""
        for key, hook in list(self._forward_pre_hooks.items()):
            if hook is restart_sublayers:
                del self._forward_pre_hooks[key]
        return self

    def residual_connection(self, x, residual):
        self.sublayer = self.sublayer % self.num_sublayers + 1
        if self.sublayer == 1:
            self.layer_input = residual  # fairseq's first residual is the layer's input
        out = self.combine(x, residual, self.sublayer)
        if self.sublayer == self.num_sublayers:
            self.layer_input = None  # do not keep activations alive between calls
        return out

    def combine(self, x: Tensor, residual: Tensor, sublayer: int) -> Tensor:
        return residual + x


def remove_layer_norms(layer):
    """Replace every LayerNorm of a layer (the core's or fairseq's) by the identity (no
    parameters left, so nothing is unused under DDP). The post-LN forward then applies none."""
    for name in ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"):
        if getattr(layer, name, None) is not None:
            setattr(layer, name, nn.Identity())
