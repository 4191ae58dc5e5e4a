"""DLCL (Wang et al. 2019) as fairseq models: ``transformer_dlcl`` and
``transformer_lm_dlcl`` (Pre-LN layers), ``transformer_dlcl_postnorm`` and
``transformer_lm_dlcl_postnorm`` (the authors' post-norm variant, Post-LN layers), whose layers
mix in the core's :class:`~layernorm_methods.methods.dlcl.DLCLLayerMixin` (the formulas, the
layer history W and its LayerNorms are described there).

DLCL's stacks (:class:`DLCLEncoder`, :class:`DLCLDecoder`) run fairseq 0.12's
``forward_scriptable`` / ``extract_features_scriptable`` with their layer loop feeding each
layer the core's ``LayerHistory.push`` of the outputs so far, in place of fairseq's loop; so the
history is a local list of one pass and the models script with TorchScript as fairseq's
transformer does. No LayerDrop (refused: a skipped layer would leave a gap in the history).
"""

import torch
from fairseq.models import register_model
from torch import Tensor

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer
from fairseq_layernorm_plugins.modules.stacks import (
    PluginLanguageModelDecoder,
    PluginTransformerDecoder,
    PluginTransformerEncoder,
)
from layernorm_methods.methods.dlcl import FINAL_NORM, DLCLLayerMixin, DLCLStack
from layernorm_methods.methods.dlcl import METHOD as CORE
from layernorm_methods.methods.dlcl import POSTNORM_METHOD as CORE_POSTNORM


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

        # DLCL: the layers, each fed from the history (the core's LayerHistory.push)
        history = self.dlcl
        kept: list[Tensor] = []
        x = history.push(kept, x)  # y_0 = the embedding
        for layer in self.layers:
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
            x = history.push(kept, y)

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

        # DLCL: the layers, each fed from the history (the core's LayerHistory.push)
        attn: Tensor | None = None
        inner_states: list[Tensor | None] = [x]
        history = self.dlcl
        kept: list[Tensor] = []
        x = history.push(kept, x)  # y_0 = the embedding
        idx = 0
        for layer in self.layers:
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
            x = history.push(kept, y)
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
        **FINAL_NORM,
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


ARCHS = register_arch_family("transformer_dlcl", CORE)
LM_ARCHS = register_lm_arch_family("transformer_lm_dlcl", CORE)
METHOD = register_method(
    "dlcl", "transformer_dlcl", "DLCL", "Wang et al. 2019", order=12, lm_model="transformer_lm_dlcl"
)
POSTNORM_ARCHS = register_arch_family("transformer_dlcl_postnorm", CORE_POSTNORM)
POSTNORM_LM_ARCHS = register_lm_arch_family("transformer_lm_dlcl_postnorm", CORE_POSTNORM)
POSTNORM_METHOD = register_method(
    "dlcl_postnorm",
    "transformer_dlcl_postnorm",
    "DLCL post-norm",
    "Wang et al. 2019",
    order=13,
    lm_model="transformer_lm_dlcl_postnorm",
)
