"""``--init-style``: the initialisation the papers' numbers come from, or fairseq 0.12's.

The seed papers ran on fairseq 0.8/0.9 (Transformer-Clinic, the T-Fixup and B2T forks;
docs/fidelity.md), where the FFN's fc1/fc2 came from fairseq's ``Linear`` helper (Xavier-uniform
weight, zero bias) and the attention input projections had zero biases. fairseq 0.12 builds
fc1/fc2 with ``nn.Linear``'s default (weight and bias uniform +-1/sqrt(fan_in): for
512 -> 1024 -> 512, half the Xavier variance in fc1 and a quarter in fc2, so the FFN branch
starts ~8x smaller) and leaves the q/k/v biases at that default too.

* ``paper`` (the default of every plugin arch but those whose authors' code builds fairseq 0.12's
  layers: B2T's fork and ResiDual's plugin): fairseq 0.8/0.9's initialisation, as above;
* ``fairseq``: fairseq 0.12's, exactly as its stock ``transformer`` is built.

Attention weights (q/k/v Xavier gain 1/sqrt(2), out_proj gain 1, out_proj bias 0) and
embeddings are the same in both. A method's own initialisation (T-Fixup, DeepNet, B2T's
rescale) is applied after this, on top of it.
"""

import torch

INIT_STYLES = ("paper", "fairseq")


def attentions(layer):
    """The layer's attention modules: self-attention, and encoder-decoder attention if any."""
    return [layer.self_attn] + ([layer.encoder_attn] if getattr(layer, "encoder_attn", None) is not None else [])


def xavier_linear_init_(linear):
    """fairseq 0.8/0.9's ``Linear``: Xavier-uniform weight, zero bias; in place, returns it."""
    with torch.no_grad():
        torch.nn.init.xavier_uniform_(linear.weight)
        if linear.bias is not None:
            linear.bias.zero_()
    return linear


def paper_init_(layer):
    """fairseq 0.8/0.9's initialisation of one layer (see the module docstring), in place."""
    with torch.no_grad():
        for fc in (layer.fc1, layer.fc2):
            xavier_linear_init_(fc)
        for attn in attentions(layer):
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
                if proj.bias is not None:
                    proj.bias.zero_()  # fairseq 0.8's in_proj_bias


def init_style_(layer, cfg):
    """Apply ``cfg.init_style`` to a layer just built (before the method's own initialisation,
    ``layers.py``; the fairseq plugin's ``modules/layers.py`` the same)."""
    style = getattr(cfg, "init_style", "fairseq")
    if style not in INIT_STYLES:
        raise ValueError(f"--init-style must be one of {', '.join(INIT_STYLES)}, not {style!r}")
    if style == "paper":
        paper_init_(layer)
