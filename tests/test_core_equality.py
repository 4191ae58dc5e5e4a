"""Each method's core model (``layernorm_methods``) computes what its fairseq arch computes, on
the fairseq model's weights: encoder-decoder and decoder-only, eval and train mode (same
dropout masks), at two depths with unequal encoder and decoder depths."""

import pytest
from helpers.core_equality import assert_same


@pytest.mark.parametrize(
    "method, flags", [("postln", ()), ("preln", ()), ("b2t", ()), ("b2t", ("--b2t-no-layer-norm",))]
)
def test_translation_models_match(tiny_data_bin, method, flags):
    assert_same(tiny_data_bin, method, "translation", *flags)


@pytest.mark.parametrize("method", ["postln", "preln", "b2t"])
def test_language_models_match(lm_data_bin, method):
    assert_same(lm_data_bin, method, "lm")
