"""Every method of ``fairseq_layernorm_plugins`` in plain PyTorch (torch alone, no fairseq):
the residual / normalisation combinations, constants and initialisations of Post-LN, Pre-LN,
Admin, T-Fixup, B2T, DeepNet and the newer methods, as ``nn.Module`` layers, stacks and models
built from a method's name. The fairseq plugin's architectures mix in the same method classes
(``methods/<name>.py``), so both compute the same thing for the same weights.

    from layernorm_methods import build_language_model
    model = build_language_model("b2t", vocab=50000, layers=12, embed_dim=512, ffn_embed_dim=2048,
                                 attention_heads=8, dropout=0.1)
    logits = model(tokens)                  # tokens (B, T) -> logits (B, T, V)

Layout: ``config.py`` (the settings, fairseq's names), ``attention.py`` (torch's
``scaled_dot_product_attention``), ``layers.py`` (encoder/decoder layers with fairseq's hooks),
``stacks.py``, ``models.py``, ``methods/`` (one module per method), ``registry.py``,
``transfer.py`` (a fairseq model's weights in a core model), ``admin.py`` (Admin's profiling of any
model built from these layers).
"""

from layernorm_methods.admin import profile_admin_
from layernorm_methods.config import StackConfig, TransformerConfig
from layernorm_methods.layers import DecoderLayer, EncoderLayer, Stack
from layernorm_methods.models import (
    EncoderDecoderModel,
    LanguageModel,
    build_language_model,
    build_model,
    configure,
)
from layernorm_methods.registry import get as get_method
from layernorm_methods.registry import method_names
from layernorm_methods.transfer import load_fairseq_state_dict

__all__ = [
    "DecoderLayer",
    "EncoderDecoderModel",
    "EncoderLayer",
    "LanguageModel",
    "Stack",
    "StackConfig",
    "TransformerConfig",
    "build_language_model",
    "build_model",
    "configure",
    "get_method",
    "load_fairseq_state_dict",
    "method_names",
    "profile_admin_",
]
__version__ = "0.1.0"
