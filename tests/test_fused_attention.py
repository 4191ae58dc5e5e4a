"""``--fused-attention``: encoder-decoder attention on PyTorch's fused path outside incremental
decoding, with the same parameters and the same results as fairseq's own path."""

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_MODEL, batch, build
from fairseq.modules import MultiheadAttention
from fairseq.modules import multihead_attention as fairseq_mha

from fairseq_layernorm_plugins.models.base import ARCH_FAMILIES
from fairseq_layernorm_plugins.modules import FusedCrossAttention


def pair(embed_dim=16, heads=4, kdim=12):
    torch.manual_seed(0)
    stock = MultiheadAttention(embed_dim, heads, kdim=kdim, vdim=kdim, encoder_decoder_attention=True)
    fused = FusedCrossAttention(embed_dim, heads, kdim=kdim, vdim=kdim, encoder_decoder_attention=True)
    fused.load_state_dict(stock.state_dict())
    return stock, fused


@pytest.fixture
def fused_calls(monkeypatch):
    """How often fairseq's attention hands a call to PyTorch's fused function."""
    calls = []
    real = fairseq_mha.F.multi_head_attention_forward

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(fairseq_mha.F, "multi_head_attention_forward", counting)
    return calls


def test_cross_attention_equals_fairseqs_own_path(fused_calls):
    stock, fused = pair()
    query, memory = torch.randn(5, 3, 16), torch.randn(7, 3, 12)
    padding = torch.zeros(3, 7, dtype=torch.bool)
    padding[1, 5:] = padding[2, 3:] = True
    for need_weights in (False, True):
        expected, expected_weights = stock(query, memory, memory, padding, static_kv=True, need_weights=need_weights)
        assert not fused_calls
        out, weights = fused(query, memory, memory, padding, static_kv=True, need_weights=need_weights)
        assert len(fused_calls) == 1
        fused_calls.clear()
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
        if need_weights:  # averaged over heads, (B, T, S), zero on padding
            torch.testing.assert_close(weights, expected_weights, rtol=1e-5, atol=1e-6)
            assert weights[1, :, 5:].abs().max() == 0
    # per-head weights and incremental decoding stay on fairseq's path, unchanged
    _, per_head = fused(query, memory, memory, padding, static_kv=True, need_head_weights=True)
    assert per_head.shape == (4, 3, 5, 7) and not fused_calls
    state_stock, state_fused = {}, {}
    for step in range(3):
        q = query[step : step + 1]
        expected, _ = stock(q, memory, memory, padding, incremental_state=state_stock, static_kv=True)
        out, _ = fused(q, memory, memory, padding, incremental_state=state_fused, static_kv=True)
        assert torch.equal(out, expected)
    assert not fused_calls


@pytest.mark.parametrize("family", sorted(ARCH_FAMILIES))
def test_every_arch_gives_the_same_outputs_and_gradients(tiny_data_bin, family, fused_calls):
    """Same initialisation (parameter by parameter), logits and gradients with and without the
    option; with it, the decoder layers' encoder-decoder attention takes the fused path."""
    flags = [*TINY_MODEL, "--dropout", "0", "--share-decoder-input-output-embed"]
    stock, task, _ = build(tiny_data_bin, family, *flags)
    fused, _, args = build(tiny_data_bin, family, *flags, "--fused-attention")
    assert args.fused_attention
    stock_params, fused_params = dict(stock.named_parameters()), dict(fused.named_parameters())
    assert stock_params.keys() == fused_params.keys()
    assert all(torch.equal(stock_params[n], fused_params[n]) for n in stock_params)
    sample = batch(task)
    grads = []
    for model in (stock, fused):
        model.train()
        fused_calls.clear()
        logits, _ = model(**sample["net_input"])
        grads.append((logits, fused_calls[:]))
        F.cross_entropy(
            logits.flatten(0, 1), sample["target"].flatten(), ignore_index=task.target_dictionary.pad()
        ).backward()
    (expected, stock_calls), (logits, fused_calls_made) = grads
    # TINY_MODEL: 2 + 2 layers; fairseq asks the last decoder layer (its alignment layer) for
    # per-head weights, which only its own path returns
    assert len(fused_calls_made) == len(stock_calls) + 2 - 1
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    for name, p in stock.named_parameters():
        torch.testing.assert_close(fused_params[name].grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)
