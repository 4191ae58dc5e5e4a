"""ResiDual (Xie et al. 2023, "ResiDual: Transformer with Dual Residual Connections"): a
Post-LN stream and, beside it, the un-normalised sum of every branch output, joined at the
top of each stack:

    x_{i} = LN(x_{i-1} + f_i(x_{i-1}))         (the Post-LN stream, the layers' own LayerNorms)
    d_{i} = d_{i-1} + s * f_i(x_{i-1}),   d_0 = s * x_0   (the dual stream, from the stack's input)
    y     = alpha * x_L + LN(d_L)                 (the stack's output)

for every sub-layer i of the stack (self-attention, encoder attention, FFN), f_i after its
dropout (the authors' code, microsoft/ResiDual ``resi_dual_layers.py`` / ``resi_dual.py``:
``res_input_norm_scale`` s = 1.0 by default, 0.05 in their 18L-18L fp16 config, ``alpha`` 1.0,
the output LayerNorm with eps 1e-7; no new parameters, fairseq 0.12's initialisation: the
default ``init_style`` ``fairseq``).

Options: ``residual_dual_scale`` (``--residual-dual-scale``) and ``residual_alpha``
(``--residual-alpha``) set s and alpha (0 included; unset, 1.0). The output LayerNorm follows
``norm_type`` as the layers' do (RMSNorm, eps 1e-7).

The dual stream lives for one forward pass in a :class:`DualStream` the stack's layers and
its output (:class:`DualOutput`, the stack's ``layer_norm``) share, since the layers pass one
tensor between them; so the fairseq models run eagerly but are not scriptable.
"""

from torch import Tensor, nn

from layernorm_methods.layers import stack_layers
from layernorm_methods.norms import norm_type_
from layernorm_methods.registry import register
from layernorm_methods.residual import SublayerResidualMixin

OUTPUT_NORM_EPS = 1e-7  # microsoft/ResiDual: the output LayerNorm's eps


class DualStream:
    """One stack's dual stream d during a forward pass: (T, B, C), or None between passes; its
    scale s (``residual_dual_scale``)."""

    def __init__(self, scale):
        self.total = None
        self.scale = scale

    def restart(self, stack, inputs):
        """Forward pre-hook of the stack: a pass starts with no sum, so the first layer that runs
        (LayerDrop may skip the first ones) starts it, and a pass cut short by an exception leaves
        nothing behind. Generation calls the stacks' ``forward`` without the hook; there every pass
        before has ended in :class:`DualOutput`, which takes the sum."""
        self.total = None


class DualOutput(nn.Module):
    """The stack's output, in place of its final LayerNorm: alpha * x_L + LN(d_L).

    Input x_L (T, B, C); output (T, B, C)."""

    def __init__(self, embed_dim, stream, alpha, cfg=None):
        super().__init__()
        self.norm = nn.LayerNorm(embed_dim, eps=OUTPUT_NORM_EPS)
        norm_type_(self, cfg, ("norm",))  # norm_type: the stack swapped its own norms before this one existed
        self.stream = stream
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        dual, self.stream.total = self.stream.total, None
        if dual is None:  # LayerDrop dropped every layer: x is x_0, and d = s * x_0
            dual = x * self.stream.scale
        return self.alpha * x + self.norm(dual)  # Xie et al. 2023: x_L + LN(x_d)


def residual_constant(cfg, name):
    """``residual_dual_scale`` / ``residual_alpha`` as given, 0 included; unset (None, as the
    archs leave it and checkpoints keep it), the authors' 1.0."""
    value = getattr(cfg, name, None)
    return 1.0 if value is None else float(value)


class ResiDualLayerMixin(SublayerResidualMixin):
    """Post-LN sub-layers that also add their branch output to the stack's dual stream;
    ``init_stack_`` gives the stack its stream and :class:`DualOutput`."""

    def method_init_(self, cfg, stack):
        super().method_init_(cfg, stack)
        self.stream = None  # the stack's DualStream (init_stack_)

    @classmethod
    def init_stack_(cls, stack_module, cfg, stack):
        super().init_stack_(stack_module, cfg, stack)
        stream = DualStream(residual_constant(cfg, "residual_dual_scale"))
        stack_module.register_forward_pre_hook(stream.restart)
        for layer in stack_layers(stack_module):
            layer.stream = stream
        alpha = residual_constant(cfg, "residual_alpha")
        stack_module.layer_norm = DualOutput(stack.embed_dim, stream, alpha, cfg)

    def combine(self, x: Tensor, residual: Tensor, sublayer: int) -> Tensor:
        """x: the branch output f_i (T, B, C), residual: x_{i-1} (T, B, C)."""
        if sublayer == 1 and self.stream.total is None:  # the first layer of this pass to run
            self.stream.total = residual * self.stream.scale  # d_0 = s * x_0
        self.stream.total = self.stream.total + x * self.stream.scale  # d_i = d_{i-1} + s * f_i
        return residual + x  # then the layer's own LayerNorm (Post-LN)


def residual_defaults(args):
    """ResiDual (Xie et al. 2023): a Post-LN stream plus LN of the sum of every branch output."""
    # the authors' plugin runs on fairseq 0.12.2's own layers (microsoft/ResiDual environment.yaml):
    # fc1/fc2 and the q/k/v biases keep nn.Linear's default, fairseq 0.12's initialisation
    args.init_style = getattr(args, "init_style", "fairseq")
    args.residual_dual_scale = getattr(args, "residual_dual_scale", None)
    args.residual_alpha = getattr(args, "residual_alpha", None)


METHOD = register("residual", ResiDualLayerMixin, residual_defaults, normalize_before=False)
