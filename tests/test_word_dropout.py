"""Word dropout (the B2T authors' ``--sampling-method worddrop``, here ``--enc-replace-rate`` /
``--dec-replace-rate``) on every plugin arch: the
formula of their fork, training only, the weights untouched (shared and tied ones too)."""

import argparse

import pytest
import torch
from conftest import TINY_MODEL, build, plugin_archs

from fairseq_layernorm_plugins.modules.word_dropout import (
    WordDropoutEmbedding,
    install_word_dropout,
    word_dropout_rates,
)

MODELS = sorted(set(plugin_archs().values()))  # one arch per registered model: the registry decides


def options(enc=0.3, dec=0.2):
    return argparse.Namespace(enc_replace_rate=enc, dec_replace_rate=dec)


def test_the_forks_formula():
    """e_t * b_t with b_t ~ Bernoulli(1 - p) per (sentence, position), no rescaling; decoder
    position 0 kept; the identity in eval mode."""
    torch.manual_seed(0)
    base = torch.nn.Embedding(50, 16, padding_idx=1)
    tokens = torch.randint(2, 50, (64, 40))
    for keep_first in (False, True):
        layer = WordDropoutEmbedding(base, 0.25, keep_first=keep_first).train()
        out, ref = layer(tokens), base(tokens)
        kept = (out != 0).any(-1)
        torch.testing.assert_close(out[kept], ref[kept])  # kept vectors are not rescaled
        assert torch.all(out[~kept] == 0)
        dropped = 1 - kept[:, 1:].float().mean().item()
        assert dropped == pytest.approx(0.25, abs=0.03)
        assert kept[:, 0].all() if keep_first else not kept[:, 0].all()
        torch.testing.assert_close(layer.eval()(tokens), ref)


def test_options():
    assert word_dropout_rates(options(enc=0, dec=0)) == (0.0, 0.0)
    assert word_dropout_rates(argparse.Namespace()) == (0.0, 0.0)
    assert word_dropout_rates(options()) == (0.3, 0.2)
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        word_dropout_rates(options(enc=1.0))


@pytest.mark.parametrize("model_name", MODELS)
def test_every_arch_same_weights_and_trains(model_name, tiny_data_bin):
    model, task, _ = build(tiny_data_bin, model_name, *TINY_MODEL, "--share-decoder-input-output-embed")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = [id(p) for p in model.parameters()]
    install_word_dropout(model, options(0.5, 0.5))
    assert isinstance(model.encoder.embed_tokens, WordDropoutEmbedding)
    assert isinstance(model.decoder.embed_tokens, WordDropoutEmbedding)
    assert model.state_dict().keys() == before.keys()
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert [id(p) for p in model.parameters()] == params  # no new parameter for the optimizer
    assert model.decoder.output_projection.weight is model.decoder.embed_tokens.weight  # still tied

    task.load_dataset("valid")
    data = task.dataset("valid")
    sample = data.collater([data[i] for i in range(4)])
    model.train()
    out = model(**sample["net_input"])[0]
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert model.encoder.embed_tokens.weight.grad is not None
    model.eval()
    with torch.no_grad():  # eval: deterministic, as without word dropout
        torch.testing.assert_close(model(**sample["net_input"])[0], model(**sample["net_input"])[0])


def test_shared_embeddings_stay_one_parameter():
    """--share-all-embeddings: encoder and decoder get their own word dropout (the decoder's
    keeps position 0) over the one shared weight."""
    model = torch.nn.Module()
    model.encoder, model.decoder = torch.nn.Module(), torch.nn.Module()
    model.encoder.embed_tokens = model.decoder.embed_tokens = torch.nn.Embedding(20, 8, padding_idx=1)
    install_word_dropout(model, options(0.1, 0.2))
    assert model.encoder.embed_tokens is not model.decoder.embed_tokens
    assert model.encoder.embed_tokens.weight is model.decoder.embed_tokens.weight
    assert len(list(model.parameters())) == 1
    assert list(model.state_dict()) == ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight"]
    assert (model.encoder.embed_tokens.p, model.decoder.embed_tokens.keep_first) == (0.1, True)


def test_scripts_with_torchscript():
    layer = WordDropoutEmbedding(torch.nn.Embedding(20, 8, padding_idx=1), 0.1, keep_first=True)
    scripted = torch.jit.script(layer.eval())
    tokens = torch.randint(2, 20, (3, 5))
    torch.testing.assert_close(scripted(tokens), layer(tokens))


def test_command_line_options_on_every_arch(tiny_data_bin):
    for model_name in MODELS:
        model = build(
            tiny_data_bin,
            model_name,
            *TINY_MODEL,
            *("--enc-replace-rate", "0.1", "--dec-replace-rate", "0.1"),
        )[0]
        assert model.encoder.embed_tokens.p == model.decoder.embed_tokens.p == 0.1, model_name
        plain = build(tiny_data_bin, model_name, *TINY_MODEL)[0]
        assert not isinstance(plain.encoder.embed_tokens, WordDropoutEmbedding), model_name
