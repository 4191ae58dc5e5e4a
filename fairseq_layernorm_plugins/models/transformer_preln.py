"""Pre-LN Transformer (Xiong et al. 2020, "On Layer Normalization in the Transformer
Architecture"): x_i = x_{i-1} + f_i(LN(x_{i-1})) in every sub-layer of both stacks,
plus a final LayerNorm on top of the encoder and of the decoder (paper Fig. 1 (b)).

fairseq implements this placement behind ``--encoder-normalize-before`` /
``--decoder-normalize-before`` (the final norms follow from the same flags), so the
method is a set of architecture defaults. Train it without warm-up, e.g. with
``--lr-scheduler epoch_decay_nowarmup`` (the paper's schedule, Sec. 4.1).
"""

from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel, register_lm_arch_family
from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel, register_s2t_arch_family
from layernorm_methods.methods.preln import METHOD as CORE


@register_model("transformer_preln")
class TransformerPreLNModel(PluginTransformerModel):
    """Pre-LN encoder-decoder Transformer (Xiong et al. 2020)."""


@register_model("transformer_lm_preln")
class TransformerPreLNLanguageModel(PluginTransformerLanguageModel):
    """Pre-LN decoder-only language model with its final LayerNorm (fairseq's ``transformer_lm_wiki103``
    has none: Baevski and Auli 2019's setting)."""


@register_model("s2t_transformer_preln")
class S2TPreLNModel(PluginS2TTransformerModel):
    """Pre-LN speech-to-text Transformer (Xiong et al. 2020)."""


ARCHS = register_arch_family("transformer_preln", CORE)
LM_ARCHS = register_lm_arch_family("transformer_lm_preln", CORE)
S2T_ARCHS = register_s2t_arch_family("s2t_transformer_preln", CORE)
METHOD = register_method(
    "preln",
    "transformer_preln",
    "Pre-LN",
    "Xiong et al. 2020",
    order=1,
    lm_model="transformer_lm_preln",
    s2t_model="s2t_transformer_preln",
)
