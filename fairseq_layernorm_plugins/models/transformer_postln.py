"""Post-LN Transformer (Vaswani et al. 2017), the baseline of every paper here:
x_i = LN(x_{i-1} + f_i(x_{i-1})) in every sub-layer of every stack, no LayerNorm before the
output.

fairseq's own ``transformer`` is exactly this placement; this arch is it with the
initialisation the papers' baselines were trained with (``--init-style paper``: fairseq
0.8/0.9's Xavier-uniform zero-bias FFN, see ``layernorm_methods/init.py``), so that every method of
a comparison starts from the same initialisation. ``--init-style fairseq`` builds the
same model as stock ``transformer``, parameter for parameter. ``transformer_lm_postln`` is
the decoder-only language model, which none of fairseq's ``transformer_lm_*`` archs can be
(they force Pre-LN).
"""

from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from layernorm_methods.methods.postln import METHOD as CORE


@register_model("transformer_postln")
class TransformerPostLNModel(PluginTransformerModel):
    """Post-LN encoder-decoder Transformer, initialised as in the papers."""


@register_model("transformer_lm_postln")
class TransformerPostLNLanguageModel(PluginTransformerLanguageModel):
    """Post-LN decoder-only language model, initialised as in the papers."""


@register_model("s2t_transformer_postln")
class S2TPostLNModel(PluginS2TTransformerModel):
    """Post-LN speech-to-text Transformer, initialised as in the papers."""


ARCHS = register_arch_family("transformer_postln", CORE)
LM_ARCHS = register_lm_arch_family("transformer_lm_postln", CORE)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_postln", CORE)
METHOD = register_method(
    "postln",
    "transformer_postln",
    "Post-LN",
    "Vaswani et al. 2017 (the papers' baseline)",
    order=0,
    lm_model="transformer_lm_postln",
    s2t_model="s2t_transformer_postln",
)
