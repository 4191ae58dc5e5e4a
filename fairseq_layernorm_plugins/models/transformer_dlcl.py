"""DLCL (Wang et al. 2019, "Learning Deep Transformer Models for Machine Translation"): the
dynamic linear combination of layers, on Pre-LN layers as the authors' deep models. Each
layer's input, and the stack's output, is a learned weighted sum of every earlier layer's
normalised output (the embedding's unnormalised),

    x_{l+1} = sum_{k=0..l} W[l, k] LN_k(y_k),    LN_0 = identity,   y_0 = the embedding
    y_{l+1} = PreLNLayer(x_{l+1})
    output  = LN_final(sum_{k=0..L} W[L, k] LN_k(y_k))

in both stacks (the authors' code, wangqiangneu/dlcl ``modules/dlcl.py``: the embedding is not
normalised, whatever its docstring says; ``--normalize-embedding`` there reads another name and
never takes effect). W is (L+1) x (L+1), lower-triangular, learnable, one scalar per entry
(``--weight-type scalar``, their default), initialised as the average (row l: 1/(l+1) for k <=
l, ``--init-value avg``), without softmax (their default). LN_1..LN_L are new LayerNorms, one
per layer output, following ``--norm-type``.

``transformer_dlcl_postnorm`` is the authors' other variant, on Post-LN layers (their code with
``normalize_before`` off): the sum is normalised instead of its terms, and the stack has no
final LayerNorm of its own,

    x_{l+1} = LN_l(sum_{k=0..l} W[l, k] y_k),   LN_0 = identity
    y_{l+1} = PostLNLayer(x_{l+1})
    output  = LN_L(sum_{k=0..L} W[L, k] y_k)

The history lives in the stack (``dlcl``: W and the LayerNorms) and is fed by a forward
pre-hook on each layer (fairseq's layers take one tensor), so these models run eagerly but are
not scriptable, and take no LayerDrop (a skipped layer would leave a gap in the history).
"""

import torch
from fairseq.models import register_model
from fairseq.modules import LayerNorm
from torch import Tensor, nn

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer, stack_layers
from fairseq_layernorm_plugins.modules.norms import norm_type_


def dlcl_average_weights(num_layers):
    """W at initialisation, (L+1, L+1): row l holds 1/(l+1) for k <= l, 0 above (Wang et al.
    2019; wangqiangneu/dlcl ``--init-value avg``)."""
    ones = torch.ones(num_layers + 1, num_layers + 1).tril()
    return ones / ones.sum(dim=1, keepdim=True)


class LayerHistory(nn.Module):
    """One stack's DLCL state: W (L+1, L+1), LN_1..LN_L, and during a pass the outputs y_0..y_l
    seen so far, each (T, B, C): pre-norm, LN_k already applied; ``post_norm``, as they came."""

    def __init__(self, num_layers, embed_dim, cfg, post_norm=False):
        super().__init__()
        self.weights = nn.Parameter(dlcl_average_weights(num_layers))
        self.layer_norms = nn.ModuleList(LayerNorm(embed_dim) for _ in range(num_layers))
        norm_type_(self.layer_norms, cfg, [str(index) for index in range(num_layers)])
        self.post_norm = post_norm
        self.outputs = []

    def normalized(self, x: Tensor, k: int) -> Tensor:
        """LN_k(x); LN_0 is the identity."""
        return x if k == 0 else self.layer_norms[k - 1](x)

    def push(self, y: Tensor, k: int):
        """Keep y_k: pre-norm, as LN_k(y_k); post-norm, as it is."""
        if k == 0:
            self.outputs = []
        self.outputs.append(y if self.post_norm else self.normalized(y, k))

    def combine(self) -> Tensor:
        """For the l + 1 outputs kept (Wang et al. 2019; wangqiangneu/dlcl ``pop``): pre-norm
        sum_{k<=l} W[l, k] LN_k(y_k), post-norm LN_l(sum_{k<=l} W[l, k] y_k)."""
        last = len(self.outputs) - 1
        total = sum(self.weights[last, k] * y for k, y in enumerate(self.outputs))
        return self.normalized(total, last) if self.post_norm else total


class HistoryRef:
    """A layer's link to its stack's :class:`LayerHistory` (not a submodule: its parameters
    belong to the stack) and the layer's index k + 1 in the history."""

    def __init__(self, history, index):
        self.history, self.index = history, index


def dlcl_layer_input(layer, args, kwargs):
    """Forward pre-hook: push the incoming y_k (the embedding for the first layer, else the
    previous layer's output) and give the layer x_{k+1} = sum W[k, :] LN(y) instead."""
    ref = layer.dlcl
    ref.history.push(args[0], ref.index)
    return (ref.history.combine(), *args[1:]), kwargs


class DLCLOutput(nn.Module):
    """The stack's output, in place of its final LayerNorm: pre-norm LN_final(sum_{k<=L} W[L, k]
    LN_k(y_k)), post-norm (no final LayerNorm: ``final_norm`` None) LN_L(sum_{k<=L} W[L, k] y_k).

    Input y_L (T, B, C); output (T, B, C)."""

    def __init__(self, history_ref, final_norm):
        super().__init__()
        self.ref = history_ref
        self.final_norm = final_norm

    def forward(self, y: Tensor) -> Tensor:
        history = self.ref.history
        history.push(y, self.ref.index)
        out = history.combine()
        history.outputs = []  # keep no activations between passes
        return out if self.final_norm is None else self.final_norm(out)


class DLCLLayerMixin:
    """Layers whose inputs come from the stack's history (``init_stack_``): pre-norm on Pre-LN
    layers, post-norm on Post-LN ones."""

    @classmethod
    def init_stack_(cls, stack_module, cfg, stack):
        super().init_stack_(stack_module, cfg, stack)
        post_norm = not (cfg.encoder if stack.kind == "encoder" else cfg.decoder).normalize_before
        stack_module.dlcl = LayerHistory(stack.num_layers, stack.embed_dim, cfg, post_norm)
        for index, layer in enumerate(stack_layers(stack_module)):
            layer.dlcl = HistoryRef(stack_module.dlcl, index)
            layer.register_forward_pre_hook(dlcl_layer_input, with_kwargs=True)
        stack_module.layer_norm = DLCLOutput(HistoryRef(stack_module.dlcl, stack.num_layers), stack_module.layer_norm)


class DLCLEncoderLayer(DLCLLayerMixin, PluginEncoderLayer):
    """DLCL's encoder layer (Pre-LN; Post-LN in the post-norm variant)."""


class DLCLDecoderLayer(DLCLLayerMixin, PluginDecoderLayer):
    """DLCL's decoder layer (Pre-LN; Post-LN in the post-norm variant)."""


class DLCLModel:
    """What DLCL adds to a model of any kind: eager only, no LayerDrop, its final LayerNorm kept."""

    scriptable = False
    incompatible_flags = {
        "encoder_layerdrop": "every layer's output is part of the history",
        "decoder_layerdrop": "every layer's output is part of the history",
        "no_decoder_final_norm": "the stack's output is LN_final of its combined history",
    }

    def __prepare_scriptable__(self):
        raise RuntimeError(
            f"{type(self).__name__}: DLCL feeds each layer from its stack's history through a forward "
            "pre-hook, so the model runs eagerly only (no TorchScript)"
        )


@register_model("transformer_dlcl")
class TransformerDLCLModel(DLCLModel, PluginTransformerModel):
    """Pre-LN encoder-decoder Transformer with DLCL in both stacks."""

    encoder_layer_cls = DLCLEncoderLayer
    decoder_layer_cls = DLCLDecoderLayer


@register_model("transformer_lm_dlcl")
class TransformerDLCLLanguageModel(DLCLModel, PluginTransformerLanguageModel):
    """Pre-LN decoder-only language model with DLCL."""

    decoder_layer_cls = DLCLDecoderLayer


POSTNORM_INCOMPATIBLE = {k: v for k, v in DLCLModel.incompatible_flags.items() if k != "no_decoder_final_norm"}


@register_model("transformer_dlcl_postnorm")
class TransformerDLCLPostNormModel(TransformerDLCLModel):
    """Post-LN encoder-decoder Transformer with post-norm DLCL in both stacks."""

    incompatible_flags = POSTNORM_INCOMPATIBLE  # no final LayerNorm to drop


@register_model("transformer_lm_dlcl_postnorm")
class TransformerDLCLPostNormLanguageModel(TransformerDLCLLanguageModel):
    """Post-LN decoder-only language model with post-norm DLCL."""

    incompatible_flags = POSTNORM_INCOMPATIBLE


def dlcl_defaults(args):
    """DLCL (Wang et al. 2019): each layer's input a learned sum of every earlier LN'd output."""


def dlcl_postnorm_defaults(args):
    """DLCL post-norm (Wang et al. 2019): each layer's input LN of a learned sum of every earlier output."""


ARCHS = register_arch_family("transformer_dlcl", dlcl_defaults, normalize_before=True)
LM_ARCHS = register_lm_arch_family("transformer_lm_dlcl", dlcl_defaults, normalize_before=True)
METHOD = register_method(
    "dlcl", "transformer_dlcl", "DLCL", "Wang et al. 2019", order=12, lm_model="transformer_lm_dlcl"
)
POSTNORM_ARCHS = register_arch_family("transformer_dlcl_postnorm", dlcl_postnorm_defaults, normalize_before=False)
POSTNORM_LM_ARCHS = register_lm_arch_family(
    "transformer_lm_dlcl_postnorm", dlcl_postnorm_defaults, normalize_before=False
)
POSTNORM_METHOD = register_method(
    "dlcl_postnorm",
    "transformer_dlcl_postnorm",
    "DLCL post-norm",
    "Wang et al. 2019",
    order=13,
    lm_model="transformer_lm_dlcl_postnorm",
)
