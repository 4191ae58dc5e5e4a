"""The method registry: every plugin model is a registered method, and a new method is one
model module plus its recipes (a toy method registered the way the README says)."""

import subprocess
import sys
import textwrap

from conftest import REPO, plugin_archs

from fairseq_layernorm_plugins.methods import METHODS, PAPER_METHODS, method_names

SEEDS = ["postln", "preln", "admin", "tfixup", "b2t", "deepnet"]
SEEDS_AFTER = [
    "periln",
    "mixln",
    "lns",
    "rezero",
    "dyt",
    "residual",
    "dlcl",
    "dlcl_postnorm",
    "subln",
]  # after the seeds


def test_every_plugin_model_is_a_method_in_table_order():
    assert {m.model for m in METHODS.values()} == set(plugin_archs().values())
    assert {m.lm_model for m in METHODS.values()} == set(plugin_archs("lm").values())
    assert method_names() == SEEDS + SEEDS_AFTER
    assert len({m.colour for m in METHODS.values()}) == len(METHODS)
    assert list(PAPER_METHODS) == SEEDS  # the main job's default: the four papers' methods and their baselines
    assert METHODS["admin"].arch("_iwslt_de_en") == "transformer_admin_iwslt_de_en"


TOY_METHOD = """
import sys
from fairseq.models import register_model

import layernorm_methods
from layernorm_methods.registry import register
from fairseq_layernorm_plugins.methods import METHODS, PAPER_METHODS, method_names, register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer


# the core: layernorm_methods/methods/toy.py
class HalfResidualMixin:
    def residual_connection(self, x, residual):
        return 0.5 * residual + x


def toy_defaults(args):
    args.toy_option = getattr(args, "toy_option", 1.0)


register("toy", HalfResidualMixin, toy_defaults, normalize_before=False)


# the plugin: fairseq_layernorm_plugins/models/transformer_toy.py
class HalfResidualEncoderLayer(HalfResidualMixin, PluginEncoderLayer):
    pass


class HalfResidualDecoderLayer(HalfResidualMixin, PluginDecoderLayer):
    pass


@register_model("transformer_toy")
class ToyModel(PluginTransformerModel):
    encoder_layer_cls = HalfResidualEncoderLayer
    decoder_layer_cls = HalfResidualDecoderLayer


register_arch_family("transformer_toy", toy_defaults, normalize_before=False)
register_method("toy", "transformer_toy", "Toy", "a test", order=3.5)

core = layernorm_methods.build_model("toy", 20, encoder_layers=1, decoder_layers=1, embed_dim=8, ffn_embed_dim=8,
                                     attention_heads=2)
print("core", "toy" in layernorm_methods.method_names(), type(core.encoder.layers[0]).__mro__[1].__name__)
# what the scripts derive from the registry
sys.path[:0] = [sys.argv[2] + "/scripts", sys.argv[2] + "/benchmarks"]
import diagnose, throughput
print("names", method_names())
print("setting", method_names("iwslt14_mini", sys.argv[1]))
print("colour", METHODS["toy"].colour, METHODS["toy"].label)
print("diagnose", diagnose.parse(["bin", "--out", "x"])[0].archs)
print("throughput", throughput.parse(["throughput.py"]).archs)
"""


def test_a_toy_method_is_one_module_and_its_recipes(tmp_path):
    configs = tmp_path / "configs" / "iwslt14_mini"
    configs.mkdir(parents=True)
    for name in ("postln", "toy"):  # the setting's recipes; the registry looks for <name>.yaml
        (configs / f"{name}.yaml").write_text("base: ../../../configs/iwslt14_mini/postln.yaml\n")
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TOY_METHOD), str(tmp_path / "configs"), str(REPO)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    assert lines["names"] == str(["postln", "preln", "admin", "tfixup", "toy", "b2t", "deepnet", *SEEDS_AFTER])
    assert lines["setting"] == str(["postln", "toy"])
    assert lines["colour"] == "C4 Toy"
    assert lines["core"] == "True HalfResidualMixin"  # the core builds it from the same class
    assert "'transformer_toy_iwslt_de_en'" in lines["diagnose"] and "'transformer_toy'" in lines["throughput"]


# A method that changes only the residual combination, in one module: Sandwich-LN (Ding et al.
# 2021, CogView; Peri-LN): Pre-LN plus a LayerNorm on each sub-layer's output, x + LN(f(LN(x))).
SANDWICH_METHOD = """
import sys
import torch
from torch import nn
from fairseq.models import register_model
from fairseq.modules import LayerNorm

sys.path[:0] = [sys.argv[2] + "/tests"]
from conftest import TINY_MODEL, batch, build, ffn
from fairseq_layernorm_plugins.methods import register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer, SublayerResidualMixin


class SandwichMixin(SublayerResidualMixin):
    def method_init_(self, cfg, stack):
        super().method_init_(cfg, stack)
        self.branch_norms = nn.ModuleList(LayerNorm(stack.embed_dim) for _ in range(self.num_sublayers))

    def combine(self, x, residual, sublayer):
        return residual + self.branch_norms[sublayer - 1](x)


class SandwichEncoderLayer(SandwichMixin, PluginEncoderLayer):
    pass


class SandwichDecoderLayer(SandwichMixin, PluginDecoderLayer):
    pass


@register_model("transformer_sandwich")
class SandwichModel(PluginTransformerModel):
    encoder_layer_cls = SandwichEncoderLayer
    decoder_layer_cls = SandwichDecoderLayer


register_arch_family("transformer_sandwich", lambda args: None, normalize_before=True)
register_method("sandwich", "transformer_sandwich", "Sandwich-LN", "Ding et al. 2021")

model, task, args = build(sys.argv[1], "transformer_sandwich", *TINY_MODEL)
layer = model.encoder.layers[0].eval()
with torch.no_grad():
    for norm in layer.branch_norms:  # not the identity LayerNorm starts as
        norm.weight.uniform_(0.5, 1.5), norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(5, 3, 32)
    h = layer.self_attn_layer_norm(x)
    x1 = x + layer.branch_norms[0](layer.self_attn(h, h, h, need_weights=False)[0])
    expected = x1 + layer.branch_norms[1](ffn(layer, layer.final_layer_norm(x1)))
    out = layer(x, encoder_padding_mask=None)
print("max_error", (out - expected).abs().max().item())
print("decoder_norms", len(model.decoder.layers[0].branch_norms))
print("pre_ln", args.encoder_normalize_before, args.decoder_normalize_before)
model.train()
loss, _, _ = task.build_criterion(args)(model, batch(task))
loss.backward()
print("grads", all(p.grad is not None for n, p in model.named_parameters() if "branch_norms" in n))
"""


def test_a_residual_combination_is_one_mixin_over_the_shared_layers(tiny_data_bin, tmp_path):
    """Sandwich-LN in one module: a mixin that adds its LayerNorms in ``method_init_`` and
    overrides ``combine``; its layer computes x + LN(f(LN(x))) per sub-layer, every branch norm
    gets a gradient, and the family is Pre-LN by ``normalize_before=True`` alone."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SANDWICH_METHOD), str(tiny_data_bin), str(REPO)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert float(lines["max_error"]) < 1e-5
    assert lines["decoder_norms"] == "3"  # self-attention, encoder attention, FFN
    assert lines["pre_ln"] == "True True" and lines["grads"] == "True"
