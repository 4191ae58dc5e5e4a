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

The history is the stack's (``dlcl``: W and the LayerNorms) and lives for one pass as a local
list of the stack's own layer loop: DLCL's stacks (:class:`DLCLEncoder`, :class:`DLCLDecoder`)
run fairseq 0.12's ``forward_scriptable`` / ``extract_features_scriptable`` with that loop in
place of fairseq's, so nothing is kept between passes (incremental decoding, a pass cut short)
and the models script with TorchScript as fairseq's transformer does. The layers are plain
Pre-LN (Post-LN) layers. They take no LayerDrop (a skipped layer would leave a gap in the
history). The stack's ``layer_norm`` is :class:`DLCLOutput`, which holds the final LayerNorm
(``layer_norm.final_norm``, checkpoints' name for it).
"""

import torch
from fairseq.models import register_model
from fairseq.modules import LayerNorm
from torch import Tensor, nn

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer, stack_layers
from fairseq_layernorm_plugins.modules.stacks import (
    PluginLanguageModelDecoder,
    PluginTransformerDecoder,
    PluginTransformerEncoder,
)
from layernorm_methods.norms import norm_type_


def dlcl_average_weights(num_layers):
    """W at initialisation, (L+1, L+1): row l holds 1/(l+1) for k <= l, 0 above (Wang et al.
    2019; wangqiangneu/dlcl ``--init-value avg``)."""
    ones = torch.ones(num_layers + 1, num_layers + 1).tril()
    return ones / ones.sum(dim=1, keepdim=True)


class LayerHistory(nn.Module):
    """One stack's DLCL parameters: W (L+1, L+1) and LN_1..LN_L (``layer_norms[k - 1]`` is
    LN_k); ``post_norm``: the post-norm variant. A pass keeps the outputs y_0..y_l seen so far
    in a list (pre-norm: LN_k(y_k); post-norm: y_k as they came), each (T, B, C)."""

    post_norm: bool

    def __init__(self, num_layers, embed_dim, cfg, post_norm=False):
        super().__init__()
        self.weights = nn.Parameter(dlcl_average_weights(num_layers))
        self.layer_norms = nn.ModuleList(LayerNorm(embed_dim) for _ in range(num_layers))
        norm_type_(self.layer_norms, cfg, [str(index) for index in range(num_layers)])
        self.post_norm = post_norm

    def combine(self, kept: list[Tensor]) -> Tensor:
        """sum_{k<=l} W[l, k] kept[k] for the l + 1 outputs kept (Wang et al. 2019;
        wangqiangneu/dlcl ``pop``), before any LN_l of the post-norm variant."""
        row = len(kept) - 1
        total = self.weights[row, 0] * kept[0]
        for k in range(1, len(kept)):
            total = total + self.weights[row, k] * kept[k]
        return total


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


class DLCLLayerMixin:
    """Layers of a DLCL stack (:class:`DLCLStack`): ``init_stack_`` gives the stack its history
    and output; pre-norm on Pre-LN layers, post-norm on Post-LN ones."""

    @classmethod
    def init_stack_(cls, stack_module, cfg, stack):
        super().init_stack_(stack_module, cfg, stack)
        if not isinstance(stack_module, DLCLStack):
            raise TypeError(
                f"{cls.__name__} feeds its layers from the stack's history: build it in a DLCL stack "
                f"(DLCLEncoder, DLCLDecoder, DLCLLanguageModelDecoder), not {type(stack_module).__name__}"
            )
        stack_layers(stack_module)  # layers FSDP wrapped refused, as ever (DLCL never ran under FSDP)
        post_norm = not (cfg.encoder if stack.kind == "encoder" else cfg.decoder).normalize_before
        stack_module.dlcl = LayerHistory(stack.num_layers, stack.embed_dim, cfg, post_norm)
        stack_module.layer_norm = DLCLOutput(stack_module.layer_norm)


class DLCLStack:
    """Marks a stack whose layer loop is DLCL's (:class:`DLCLEncoder`, :class:`DLCLDecoder`)."""


class DLCLEncoder(DLCLStack, PluginTransformerEncoder):
    """An encoder whose layers take their inputs from the history (fairseq 0.12's
    ``TransformerEncoderBase.forward_scriptable`` with DLCL's loop).

    Input ``src_tokens`` (B, S); output ``encoder_out["encoder_out"][0]`` (S, B, C); the
    ``encoder_states`` asked for with ``return_all_hiddens`` are the layers' outputs y_k."""

    def forward_scriptable(
        self,
        src_tokens,
        src_lengths: torch.Tensor | None = None,
        return_all_hiddens: bool = False,
        token_embeddings: torch.Tensor | None = None,
    ):
        # fairseq 0.12 from here to the layers
        encoder_padding_mask = src_tokens.eq(self.padding_idx)
        has_pads = torch.tensor(src_tokens.device.type == "xla") or encoder_padding_mask.any()
        # Torchscript doesn't handle bool Tensor correctly, so we need to work around (fairseq).
        if torch.jit.is_scripting():
            has_pads = torch.tensor(1) if has_pads else torch.tensor(0)

        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings)
        x = x * (1 - encoder_padding_mask.unsqueeze(-1).type_as(x) * has_pads.type_as(x))
        x = x.transpose(0, 1)  # B x T x C -> T x B x C

        encoder_states = []
        fc_results = []
        if return_all_hiddens:
            encoder_states.append(x)

        # DLCL: the layers, each fed from the history (y_0 = the embedding, LN_0 the identity)
        history = self.dlcl
        kept: list[Tensor] = [x]
        x = history.combine(kept)
        for layer, norm in zip(self.layers, history.layer_norms):
            lr = layer(x, encoder_padding_mask=encoder_padding_mask if has_pads else None)
            if isinstance(lr, tuple) and len(lr) == 2:
                y, fc_result = lr
            else:
                y = lr
                fc_result = None
            if return_all_hiddens and not torch.jit.is_scripting():
                assert encoder_states is not None
                encoder_states.append(y)
                fc_results.append(fc_result)
            if history.post_norm:
                kept.append(y)
                x = norm(history.combine(kept))
            else:
                kept.append(norm(y))
                x = history.combine(kept)

        # fairseq 0.12 from here
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        src_lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1).contiguous()
        return {
            "encoder_out": [x],  # T x B x C
            "encoder_padding_mask": [encoder_padding_mask],  # B x T
            "encoder_embedding": [encoder_embedding],  # B x T x C
            "encoder_states": encoder_states,  # List[T x B x C]
            "fc_results": fc_results,  # List[T x B x C]
            "src_tokens": [],
            "src_lengths": [src_lengths],
        }


class DLCLDecoderMixin(DLCLStack):
    """A decoder whose layers take their inputs from the history (fairseq 0.12's
    ``TransformerDecoderBase.extract_features_scriptable`` with DLCL's loop); the
    ``inner_states`` are the embedding and the layers' outputs y_k, as fairseq's."""

    def extract_features_scriptable(
        self,
        prev_output_tokens,
        encoder_out: dict[str, list[Tensor]] | None,
        incremental_state: dict[str, dict[str, Tensor | None]] | None = None,
        full_context_alignment: bool = False,
        alignment_layer: int | None = None,
        alignment_heads: int | None = None,
    ):
        # fairseq 0.12 from here to the layers
        bs, slen = prev_output_tokens.size()
        if alignment_layer is None:
            alignment_layer = self.num_layers - 1

        enc: Tensor | None = None
        padding_mask: Tensor | None = None
        if encoder_out is not None and len(encoder_out["encoder_out"]) > 0:
            enc = encoder_out["encoder_out"][0]
        if encoder_out is not None and len(encoder_out["encoder_padding_mask"]) > 0:
            padding_mask = encoder_out["encoder_padding_mask"][0]

        positions = None
        if self.embed_positions is not None:
            positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state)

        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            if positions is not None:
                positions = positions[:, -1:]

        # Prevent torchscript exporting issue for dynamic quant embedding (fairseq)
        prev_output_tokens = prev_output_tokens.contiguous()
        x = self.embed_scale * self.embed_tokens(prev_output_tokens)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if positions is not None:
            x += positions
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        x = x.transpose(0, 1)  # B x T x C -> T x B x C

        self_attn_padding_mask: Tensor | None = None
        if self.cross_self_attention or prev_output_tokens.eq(self.padding_idx).any():
            self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)

        # DLCL: the layers, each fed from the history (y_0 = the embedding, LN_0 the identity)
        attn: Tensor | None = None
        inner_states: list[Tensor | None] = [x]
        history = self.dlcl
        kept: list[Tensor] = [x]
        x = history.combine(kept)
        idx = 0
        for layer, norm in zip(self.layers, history.layer_norms):
            if incremental_state is None and not full_context_alignment:
                self_attn_mask = self.buffered_future_mask(x)
            else:
                self_attn_mask = None
            y, layer_attn, _ = layer(
                x,
                enc,
                padding_mask,
                incremental_state,
                self_attn_mask=self_attn_mask,
                self_attn_padding_mask=self_attn_padding_mask,
                need_attn=bool(idx == alignment_layer),
                need_head_weights=bool(idx == alignment_layer),
            )
            inner_states.append(y)
            if layer_attn is not None and idx == alignment_layer:
                attn = layer_attn.float().to(y)
            if history.post_norm:
                kept.append(y)
                x = norm(history.combine(kept))
            else:
                kept.append(norm(y))
                x = history.combine(kept)
            idx += 1

        # fairseq 0.12 from here
        if attn is not None:
            if alignment_heads is not None:
                attn = attn[:alignment_heads]
            attn = attn.mean(dim=0)  # average probabilities over heads
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = x.transpose(0, 1)  # T x B x C -> B x T x C
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        return x, {"attn": [attn], "inner_states": inner_states}


class DLCLDecoder(DLCLDecoderMixin, PluginTransformerDecoder):
    """The decoder of a DLCL encoder-decoder.

    Input ``prev_output_tokens`` (B, T); output logits (B, T, V)."""


class DLCLLanguageModelDecoder(DLCLDecoderMixin, PluginLanguageModelDecoder):
    """The decoder of a DLCL language model.

    Input ``src_tokens`` (B, T); output logits (B, T, V)."""


class DLCLEncoderLayer(DLCLLayerMixin, PluginEncoderLayer):
    """DLCL's encoder layer (Pre-LN; Post-LN in the post-norm variant)."""


class DLCLDecoderLayer(DLCLLayerMixin, PluginDecoderLayer):
    """DLCL's decoder layer (Pre-LN; Post-LN in the post-norm variant)."""


class DLCLModel:
    """What DLCL adds to a model of any kind: no LayerDrop, its final LayerNorm kept."""

    incompatible_flags = {
        "encoder_layerdrop": "every layer's output is part of the history",
        "decoder_layerdrop": "every layer's output is part of the history",
        "no_decoder_final_norm": "the stack's output is LN_final of its combined history",
    }


@register_model("transformer_dlcl")
class TransformerDLCLModel(DLCLModel, PluginTransformerModel):
    """Pre-LN encoder-decoder Transformer with DLCL in both stacks."""

    encoder_layer_cls = DLCLEncoderLayer
    decoder_layer_cls = DLCLDecoderLayer
    encoder_cls = DLCLEncoder
    decoder_cls = DLCLDecoder


@register_model("transformer_lm_dlcl")
class TransformerDLCLLanguageModel(DLCLModel, PluginTransformerLanguageModel):
    """Pre-LN decoder-only language model with DLCL."""

    decoder_layer_cls = DLCLDecoderLayer
    decoder_cls = DLCLLanguageModelDecoder


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
