"""T-Fixup (Huang et al. 2020, "Improving Transformer Optimization Through Better
Initialization"): a Post-LN Transformer with every LayerNorm removed (per layer,
embedding, final), trained without warm-up (fairseq's ``--lr-scheduler inverse_sqrt_nowarmup``)
after this initialisation (paper Sec. 3.3, as in the authors' fairseq code):

* Xavier everywhere: the attention already is; fc1/fc2 are built Xavier-uniform with zero
  bias (fairseq 0.12 uses PyTorch's default there), and the value projection re-drawn at
  gain 1 (fairseq uses 1/sqrt(2); the authors multiply by sqrt(2)); input embeddings
  N(0, d^-1/2) with a zero padding row (fairseq's default);
* decoder: v/out projections of both attentions, fc1, fc2 x (9 N_d)^-1/4;
  encoder: v/out projections, fc1, fc2 x 0.67 N_e^-1/4;
* embeddings: encoder x (9 N_e)^-1/4, decoder x (9 N_d)^-1/4; one shared matrix
  (``share_all_embeddings``) is scaled once, by the encoder factor;
* q/k projections are left as initialised; fc1/fc2/out biases start at zero;
* q/k/v biases (``tfixup_qkv_bias``, ``--tfixup-qkv-bias``): ``fork`` (default), ``nn.Linear``'s
  default U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as in the authors' fork (fairseq 0.9: separate q/k/v
  ``nn.Linear``, which ``MultiheadAttention.reset_parameters`` never resets), or ``zero``
  (fairseq 0.8's ``in_proj_bias``). T-Fixup builds fc1/fc2 itself and sets these biases, so
  ``init_style`` changes nothing here.

Decoder-only language models: the authors published no form (T-Fixup issue #6 asks and stays
unanswered). Here v/out/fc1/fc2 and the input embedding (every table of an adaptive input)
are scaled by (6 M)^-1/4: the paper's rule that each of L residual blocks contributes
Theta(1/L), giving (3L)^-1/4 (their decoder: L = 3N), with the L = 2M blocks of an M-layer
decoder-only stack (docs/fidelity.md).

The authors' decoder still created an (unused) encoder-attention LayerNorm; none is
left here, so DDP's unused-parameter check passes.
"""

import torch
from torch import nn

from layernorm_methods.init import attentions
from layernorm_methods.layers import xavier_linear
from layernorm_methods.registry import register
from layernorm_methods.residual import remove_layer_norms

TFIXUP_QKV_BIASES = ("fork", "zero")


def tfixup_decoder_scale(num_decoder_layers):
    """(9 N_d)^-1/4: decoder v/w, MLP weights and decoder embedding (Huang et al. 2020, Sec. 3.3)."""
    return (9 * num_decoder_layers) ** -0.25


def tfixup_encoder_scale(num_encoder_layers):
    """0.67 N_e^-1/4: encoder v/w and MLP weights (Huang et al. 2020, Sec. 3.3 and App. C)."""
    return 0.67 * num_encoder_layers**-0.25


def tfixup_lm_scale(num_layers):
    """(6 M)^-1/4: v/w, MLP weights and input embedding of a decoder-only model of M layers. No
    form by the authors; Huang et al. 2020's Sec. 3.3 rule, (3L)^-1/4 for L residual blocks
    (their decoder: L = 3N, (9N)^-1/4), with a decoder-only stack's L = 2M blocks."""
    return (6 * num_layers) ** -0.25


def tfixup_encoder_embedding_scale(num_encoder_layers):
    """(9 N_e)^-1/4: encoder input embedding (Huang et al. 2020, Sec. 3.3)."""
    return (9 * num_encoder_layers) ** -0.25


def linear_default_bias_(bias, fan_in):
    """nn.Linear's default bias, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (torch.nn.Linear.reset_parameters)."""
    bound = fan_in**-0.5
    torch.nn.init.uniform_(bias, -bound, bound)


class TFixupLayerMixin:
    """No LayerNorm; Xavier fc1/fc2; v at Xavier gain 1; v/out/fc1/fc2 and the stack's
    embedding scaled by the stack's T-Fixup factor."""

    def build_fc1(self, input_dim, output_dim, q_noise, qn_block_size):
        return self.quantised(xavier_linear(input_dim, output_dim), q_noise, qn_block_size)

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        return self.quantised(xavier_linear(input_dim, output_dim), q_noise, qn_block_size)

    def method_init_(self, cfg, stack):
        super().method_init_(cfg, stack)
        scale = {"encoder": tfixup_encoder_scale, "decoder": tfixup_decoder_scale, "lm": tfixup_lm_scale}[stack.kind](
            stack.num_layers
        )
        remove_layer_norms(self)
        qkv_bias = getattr(cfg, "tfixup_qkv_bias", None) or "fork"
        if qkv_bias not in TFIXUP_QKV_BIASES:
            raise ValueError(f"--tfixup-qkv-bias must be one of {', '.join(TFIXUP_QKV_BIASES)}, not {qkv_bias!r}")
        with torch.no_grad():
            for attn in attentions(self):
                for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
                    if proj.bias is None:
                        continue
                    if qkv_bias == "fork":
                        linear_default_bias_(proj.bias, proj.in_features)
                    else:
                        proj.bias.zero_()
                torch.nn.init.xavier_uniform_(attn.v_proj.weight, gain=1.0)
                attn.v_proj.weight.mul_(scale)
                attn.out_proj.weight.mul_(scale)
            self.fc1.weight.mul_(scale)
            self.fc2.weight.mul_(scale)

    @classmethod
    def init_stack_(cls, stack_module, cfg, stack):
        """The stack's input embedding: encoder x (9 N_e)^-1/4, decoder x (9 N_d)^-1/4."""
        super().init_stack_(stack_module, cfg, stack)
        if stack.kind == "decoder" and cfg.share_all_embeddings:
            return  # one matrix for both stacks: scaled once, by the encoder factor
        scale = {"encoder": tfixup_encoder_embedding_scale, "decoder": tfixup_decoder_scale, "lm": tfixup_lm_scale}[
            stack.kind
        ](stack.num_layers)
        with torch.no_grad():
            for table in stack_module.embed_tokens.modules():  # one, or adaptive input's one per band
                if isinstance(table, nn.Embedding):
                    table.weight.mul_(scale)


def tfixup_defaults(args):
    """T-Fixup (Huang et al. 2020): no LayerNorm, scaled initialisation, no warm-up."""
    args.layernorm_embedding = getattr(args, "layernorm_embedding", False)
    args.tfixup_qkv_bias = getattr(args, "tfixup_qkv_bias", None) or "fork"


NO_LAYER_NORM = {"layernorm_embedding": "T-Fixup has no LayerNorm"}
METHOD = register("tfixup", TFixupLayerMixin, tfixup_defaults, normalize_before=False, refuses=NO_LAYER_NORM)
