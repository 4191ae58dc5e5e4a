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
per layer output, following ``norm_type``.

``dlcl_postnorm`` is the authors' other variant, on Post-LN layers (their code with
``normalize_before`` off): the sum is normalised instead of its terms, and the stack has no
final LayerNorm of its own,

    x_{l+1} = LN_l(sum_{k=0..l} W[l, k] y_k),   LN_0 = identity
    y_{l+1} = PostLNLayer(x_{l+1})
    output  = LN_L(sum_{k=0..L} W[L, k] y_k)

The history is the stack's (``dlcl``, a :class:`LayerHistory`: W and the LayerNorms) and lives
for one pass as a local list of the stack's own layer loop, which feeds each layer
:meth:`LayerHistory.push` of the outputs so far (the rule above, written once: the core's
:class:`DLCLEncoder` / :class:`DLCLDecoder` and the fairseq plugin's DLCL stacks call it); so
nothing is kept between passes (incremental decoding, a pass cut short) and the fairseq models
script with TorchScript. The layers are plain Pre-LN (Post-LN) layers. They take no LayerDrop
(a skipped layer would leave a gap in the history). The stack's ``layer_norm`` is
:class:`DLCLOutput`, which holds the final LayerNorm (``layer_norm.final_norm``, checkpoints'
name for it).
"""

from typing import Optional

import torch
from torch import Tensor, nn

from layernorm_methods.layers import stack_layers
from layernorm_methods.norms import norm_type_
from layernorm_methods.registry import register
from layernorm_methods.stacks import Decoder, Encoder


def dlcl_average_weights(num_layers):
    """W at initialisation, (L+1, L+1): row l holds 1/(l+1) for k <= l, 0 above (Wang et al.
    2019; wangqiangneu/dlcl ``--init-value avg``)."""
    ones = torch.ones(num_layers + 1, num_layers + 1).tril()
    return ones / ones.sum(dim=1, keepdim=True)


class LayerHistory(nn.Module):
    """One stack's DLCL parameters: W (L+1, L+1) and LN_1..LN_L (``layer_norms[k - 1]`` is
    LN_k); ``post_norm``: the post-norm variant. A pass keeps the outputs y_0..y_l seen so far
    in a list (pre-norm: LN_k(y_k); post-norm: y_k as they came), each (T, B, C), which
    :meth:`push` extends."""

    post_norm: bool

    def __init__(self, num_layers, embed_dim, cfg, post_norm=False):
        super().__init__()
        self.weights = nn.Parameter(dlcl_average_weights(num_layers))
        self.layer_norms = nn.ModuleList(nn.LayerNorm(embed_dim) for _ in range(num_layers))
        norm_type_(self.layer_norms, cfg, [str(index) for index in range(num_layers)])
        self.post_norm = post_norm

    def normalise(self, index: int, x: Tensor) -> Tensor:
        """LN_index(x), LN_0 the identity (TorchScript indexes a ModuleList by literals only:
        the LayerNorms are enumerated)."""
        for k, layer_norm in enumerate(self.layer_norms):
            if k + 1 == index:
                x = layer_norm(x)
        return x

    def combine(self, kept: list[Tensor]) -> Tensor:
        """sum_{k<=l} W[l, k] kept[k] for the l + 1 outputs kept (Wang et al. 2019;
        wangqiangneu/dlcl ``pop``), before any LN_l of the post-norm variant."""
        row = len(kept) - 1
        total = self.weights[row, 0] * kept[0]
        for k in range(1, len(kept)):
            total = total + self.weights[row, k] * kept[k]
        return total

    def push(self, kept: list[Tensor], y: Tensor) -> Tensor:
        """Keep y_l (l = ``len(kept)``: the embedding y_0 first, then each layer's output) and
        return the next layer's input x_{l+1} (T, B, C), the stack's output before
        :class:`DLCLOutput` after the last layer."""
        index = len(kept)
        if not self.post_norm:
            y = self.normalise(index, y)  # Wang et al. 2019: keep LN_l(y_l)
        kept.append(y)
        x = self.combine(kept)  # sum_{k<=l} W[l, k] kept[k]
        if self.post_norm:
            x = self.normalise(index, x)  # post-norm: x_{l+1} = LN_l(sum_{k<=l} W[l, k] y_k)
        return x


class DLCLOutput(nn.Module):
    """The stack's ``layer_norm``: its final LayerNorm on the combined history, pre-norm
    LN_final(sum_{k<=L} W[L, k] LN_k(y_k)); post-norm none (``final_norm`` None: the history
    already ends in LN_L). The stack's loop has combined the history.

    Input (T, B, C); output (T, B, C)."""

    def __init__(self, final_norm):
        super().__init__()
        self.final_norm = final_norm

    def forward(self, x: Tensor) -> Tensor:
        if self.final_norm is None:
            return x
        return self.final_norm(x)


class DLCLStack:
    """Marks a stack whose layer loop is DLCL's: its layers fed from ``self.dlcl``
    (:meth:`LayerHistory.push`); the core's :class:`DLCLEncoder` / :class:`DLCLDecoder` and
    the fairseq plugin's DLCL stacks."""


class DLCLLayerMixin:
    """Layers of a DLCL stack (:class:`DLCLStack`): ``init_stack_`` gives the stack its history
    and output; pre-norm on Pre-LN layers, post-norm on Post-LN ones."""

    @classmethod
    def init_stack_(cls, stack_module, cfg, stack):
        super().init_stack_(stack_module, cfg, stack)
        if not isinstance(stack_module, DLCLStack):
            raise TypeError(
                f"{cls.__name__} feeds its layers from the stack's history: build it in a DLCL stack "
                f"(a DLCLStack: DLCLEncoder, DLCLDecoder, ...), not {type(stack_module).__name__}"
            )
        stack_layers(stack_module)  # layers FSDP wrapped refused, as ever (DLCL never ran under FSDP)
        post_norm = not (cfg.encoder if stack.kind == "encoder" else cfg.decoder).normalize_before
        stack_module.dlcl = LayerHistory(stack.num_layers, stack.embed_dim, cfg, post_norm)
        stack_module.layer_norm = DLCLOutput(stack_module.layer_norm)


class DLCLEncoder(DLCLStack, Encoder):
    """The core's encoder whose layers take their inputs from the history.

    Input ``src_tokens`` (B, S); output ``(x (S, B, C), padding mask (B, S) or None)``."""

    def run_layers(self, x: Tensor, padding_mask: Optional[Tensor]) -> Tensor:
        history, kept = self.dlcl, []
        x = history.push(kept, x)  # y_0 = the embedding
        for layer in self.layers:
            x = history.push(kept, layer(x, encoder_padding_mask=padding_mask))
        return x


class DLCLDecoder(DLCLStack, Decoder):
    """The core's decoder (of an encoder-decoder, or of a language model) whose layers take
    their inputs from the history.

    Input ``prev_output_tokens`` (B, T), encoder output (S, B, C) and its padding mask (B, S);
    output logits (B, T, V)."""

    def run_layers(
        self,
        x: Tensor,
        encoder_out: Optional[Tensor],
        encoder_padding_mask: Optional[Tensor],
        self_attn_padding_mask: Optional[Tensor],
    ) -> Tensor:
        history, kept = self.dlcl, []
        x = history.push(kept, x)  # y_0 = the embedding
        for layer in self.layers:
            y = layer(x, encoder_out, encoder_padding_mask, self_attn_padding_mask=self_attn_padding_mask)
            x = history.push(kept, y)
        return x


def dlcl_defaults(args):
    """DLCL (Wang et al. 2019): each layer's input a learned sum of every earlier LN'd output."""


def dlcl_postnorm_defaults(args):
    """DLCL post-norm (Wang et al. 2019): each layer's input LN of a learned sum of every earlier output."""


STACKS = dict(encoder_cls=DLCLEncoder, decoder_cls=DLCLDecoder)
FINAL_NORM = {"no_decoder_final_norm": "the stack's output is LN_final of its combined history"}
METHOD = register("dlcl", DLCLLayerMixin, dlcl_defaults, normalize_before=True, refuses=FINAL_NORM, **STACKS)
POSTNORM_METHOD = register("dlcl_postnorm", DLCLLayerMixin, dlcl_postnorm_defaults, normalize_before=False, **STACKS)
