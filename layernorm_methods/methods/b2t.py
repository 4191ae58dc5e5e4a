"""B2T connection (Takase et al. 2023, "On Layer Normalizations and Residual
Connections in Transformers"): Post-LN plus a residual from each layer's input to
just before the layer's last LayerNorm, skipping the intermediate ones (Eq. 5):

    encoder: h = LN1(x + Attn(x));                         out = LN2(x + h + FFN(h))
    decoder: h1 = LN(x + SelfAttn(x)); h2 = LN(h1 + CrossAttn(h1)); out = LN(x + h2 + FFN(h2))
    language model (Sec. 6.3): as the encoder, with causal self-attention

in every layer, the last one included, and no extra LayerNorm on top of the stack.
Incremental decoding needs nothing extra: the connection stays within a position.

Options:
* ``b2t_no_layer_norm`` (``--b2t-no-layer-norm``) (paper App. D, "w/o LN"): every LayerNorm removed, and the
  last sub-layer becomes out = alpha * x + beta * (h + FFN(h)) with h = x + Attn(x)
  (decoder analogous), alpha = min(N/12, N^-0.15), beta = d^-0.2, per stack.
* initialisation: ``init_style`` ``fairseq`` by default, as the authors' fork builds its layers
  (fc1/fc2 and the q/k/v biases at ``nn.Linear``'s default; the other papers' forks use
  fairseq 0.8/0.9's Xavier ``Linear``, ``layernorm_methods/init.py``). The paper's Post-LN and Pre-LN
  baselines come from the same fork: compare them with ``--init-style fairseq`` too.
* ``b2t_weight_rescale`` (``--b2t-weight-rescale``): the authors' later code (2023, not in the paper)
  multiplies every non-LayerNorm weight matrix of a stack's layers by N^-0.5 (N the
  stack's layer count; embeddings untouched). Off by default.
"""

import torch
from torch import Tensor

from layernorm_methods.registry import register
from layernorm_methods.residual import SublayerResidualMixin, remove_layer_norms


def b2t_no_ln_alpha(num_layers):
    """alpha = min(N/12, N^-0.15) (Takase et al. 2023, App. D, Eq. 7)."""
    return min(num_layers / 12, num_layers**-0.15)


def b2t_no_ln_beta(embed_dim):
    """beta = d^-0.2 (Takase et al. 2023, App. D, Eq. 8)."""
    return embed_dim**-0.2


def b2t_weight_rescale(num_layers):
    """N^-0.5: the authors' later weight rescaling (their code, 2023; not in the paper)."""
    return num_layers**-0.5


class B2TLayerMixin(SublayerResidualMixin):
    """The B2T connection on fairseq's ``residual_connection`` hook (Eq. 5, or Eq. 6 w/o LN)."""

    def method_init_(self, cfg, stack):
        super().method_init_(cfg, stack)
        num_layers, embed_dim = stack.num_layers, stack.embed_dim
        self.no_layer_norm = cfg.b2t_no_layer_norm
        self.alpha, self.beta = 1.0, 1.0  # Eq. 6's scales; unused with the LayerNorms (Eq. 5)
        if self.no_layer_norm:
            remove_layer_norms(self)
            self.alpha, self.beta = b2t_no_ln_alpha(num_layers), b2t_no_ln_beta(embed_dim)
        if cfg.b2t_weight_rescale:
            with torch.no_grad():
                for name, p in self.named_parameters():
                    if name.endswith("weight") and p.dim() == 2:
                        p.mul_(b2t_weight_rescale(num_layers))

    def combine(self, x: Tensor, residual: Tensor, sublayer: int) -> Tensor:
        """x: the sub-layer's branch output, residual: its input, both (T, B, C)."""
        if sublayer < self.num_sublayers:
            return residual + x
        layer_input = self.layer_input
        if layer_input is None:
            raise RuntimeError("B2T: no layer input was recorded at sub-layer 1")
        if self.no_layer_norm:
            return self.alpha * layer_input + self.beta * (residual + x)  # Eq. 6
        return layer_input + residual + x  # Eq. 5


def b2t_defaults(args):
    """B2T connection (Takase et al. 2023): Post-LN plus the bottom-to-top residual."""
    # the authors' fork (takase/b2t_connection) builds fc1/fc2 as plain nn.Linear and keeps the
    # q/k/v biases' nn.Linear default: fairseq 0.12's initialisation, not fairseq 0.8/0.9's
    args.init_style = getattr(args, "init_style", "fairseq")
    args.b2t_no_layer_norm = getattr(args, "b2t_no_layer_norm", False)
    args.b2t_weight_rescale = getattr(args, "b2t_weight_rescale", False)


METHOD = register("b2t", B2TLayerMixin, b2t_defaults, normalize_before=False)
