"""The method registry: every plugin model is a registered method, and a new method is one
model module plus its recipes (a toy method registered the way the README says)."""

import subprocess
import sys
import textwrap

from conftest import REPO, plugin_archs

from fairseq_layernorm_plugins.methods import METHODS, method_names


def test_every_plugin_model_is_a_method_in_table_order():
    assert {m.model for m in METHODS.values()} == set(plugin_archs().values())
    assert method_names() == ["postln", "preln", "admin", "tfixup", "b2t", "deepnet"]
    assert len({m.colour for m in METHODS.values()}) == len(METHODS)
    assert method_names("multi30k") == method_names()  # the main job runs every method
    assert METHODS["admin"].arch("_iwslt_de_en") == "transformer_admin_iwslt_de_en"


TOY_METHOD = """
import sys
from fairseq.models import register_model

from fairseq_layernorm_plugins.methods import METHODS, method_names, register_method
from fairseq_layernorm_plugins.models.base import PluginTransformerModel, register_arch_family
from fairseq_layernorm_plugins.modules import PluginDecoderLayer, PluginEncoderLayer


class HalfResidualEncoderLayer(PluginEncoderLayer):
    def residual_connection(self, x, residual):
        return 0.5 * residual + x


@register_model("transformer_toy")
class ToyModel(PluginTransformerModel):
    encoder_layer_cls = HalfResidualEncoderLayer
    decoder_layer_cls = PluginDecoderLayer


def toy_defaults(args):
    args.encoder_normalize_before = getattr(args, "encoder_normalize_before", False)


register_arch_family("transformer_toy", toy_defaults)
register_method("toy", "transformer_toy", "Toy", "a test", order=3.5)

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
    assert lines["names"] == str(["postln", "preln", "admin", "tfixup", "toy", "b2t", "deepnet"])
    assert lines["setting"] == str(["postln", "toy"])
    assert lines["colour"] == "C4 Toy"
    assert "'transformer_toy_iwslt_de_en'" in lines["diagnose"] and "'transformer_toy'" in lines["throughput"]
