"""``--fused-attention``: the decoder's attention on PyTorch's fused path, encoder-decoder
attention in training and both attentions in incremental decoding, with the same parameters,
cache and results as fairseq's own path."""

import shutil
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import PLUGIN_DIR, REPO, TINY_MODEL, batch, build, json_records, run_cli
from fairseq.modules import MultiheadAttention
from fairseq.modules import multihead_attention as fairseq_mha

from fairseq_layernorm_plugins.models.base import ARCH_FAMILIES
from fairseq_layernorm_plugins.modules import FusedAttention


def pair(embed_dim=16, heads=4, kdim=12):
    torch.manual_seed(0)
    stock = MultiheadAttention(embed_dim, heads, kdim=kdim, vdim=kdim, encoder_decoder_attention=True)
    fused = FusedAttention(embed_dim, heads, kdim=kdim, vdim=kdim, encoder_decoder_attention=True)
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
    # per-head weights, and incremental steps that return weights, stay on fairseq's path, unchanged
    _, per_head = fused(query, memory, memory, padding, static_kv=True, need_head_weights=True)
    assert per_head.shape == (4, 3, 5, 7) and not fused_calls
    state_stock, state_fused = {}, {}
    for step in range(3):
        q = query[step : step + 1]
        expected, expected_weights = stock(q, memory, memory, padding, incremental_state=state_stock, static_kv=True)
        out, weights = fused(q, memory, memory, padding, incremental_state=state_fused, static_kv=True)
        assert torch.equal(out, expected) and torch.equal(weights, expected_weights)
    assert not fused_calls


@pytest.fixture
def fused_steps(monkeypatch):
    """How often FusedAttention runs an incremental-decoding call itself."""
    calls = []
    real = FusedAttention._fused_step

    def counting(self, *args):
        calls.append(1)
        return real(self, *args)

    monkeypatch.setattr(FusedAttention, "_fused_step", counting)
    return calls


def decode_both(stock, fused, steps, query, memory=None, padding=None, reorders=()):
    """Run both modules step by step as fairseq's decoder does (static_kv for encoder-decoder
    attention, need_weights=False), reordering their caches as beam search does after the steps
    in ``reorders`` ({step: new_order}); assert equal outputs and caches at every step."""
    state_stock, state_fused = {}, {}
    for step in range(steps):
        q = query[step : step + 1]
        kwargs = dict(static_kv=True) if memory is not None else {}
        expected, _ = stock(q, memory, memory, padding, incremental_state=state_stock, need_weights=False, **kwargs)
        out, _ = fused(q, memory, memory, padding, incremental_state=state_fused, need_weights=False, **kwargs)
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
        cache_stock, cache_fused = stock._get_input_buffer(state_stock), fused._get_input_buffer(state_fused)
        assert cache_stock.keys() == cache_fused.keys()
        for name in ("prev_key", "prev_value"):  # fairseq's layout (B, H, S, D), so its beam reordering applies
            torch.testing.assert_close(cache_fused[name], cache_stock[name], rtol=1e-6, atol=0)
        if step in reorders:
            stock.reorder_incremental_state(state_stock, reorders[step])
            fused.reorder_incremental_state(state_fused, reorders[step])
            order = reorders[step]
            query = query[:, order]
            if memory is not None:  # as fairseq reorders the encoder output
                memory, padding = memory[:, order], padding[order]


def test_incremental_self_attention_equals_fairseqs(fused_steps):
    torch.manual_seed(0)
    stock = MultiheadAttention(16, 4, self_attention=True)
    fused = FusedAttention(16, 4, self_attention=True)
    fused.load_state_dict(stock.state_dict())
    # 6 hypotheses; after step 2 beam search keeps 4 of them, two twice (new_order)
    decode_both(stock, fused, 5, torch.randn(5, 6, 16), reorders={2: torch.tensor([0, 0, 3, 5])})
    assert len(fused_steps) == 5


@pytest.mark.parametrize("beam", [1, 3])
def test_incremental_encoder_decoder_attention_equals_fairseqs(fused_steps, beam):
    """With ``set_beam_size`` fairseq keeps one copy of each source's keys for all its beams;
    so does the fused step (2 sentences x beam hypotheses; the second sentence's source padded;
    after step 1 the first sentence is finished and leaves the batch)."""
    stock, fused = pair()
    for module in (stock, fused):
        module.set_beam_size(beam)
    sentences = 2
    memory = torch.randn(7, sentences, 12).repeat_interleave(beam, dim=1)  # as fairseq expands the encoder output
    padding = torch.zeros(sentences, 7, dtype=torch.bool)
    padding[1, 4:] = True
    padding = padding.repeat_interleave(beam, dim=0)
    keep_second = torch.arange(beam, 2 * beam)
    decode_both(stock, fused, 3, torch.randn(3, sentences * beam, 16), memory, padding, reorders={1: keep_second})
    assert len(fused_steps) == 3


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


@pytest.mark.parametrize("family", sorted(ARCH_FAMILIES))
def test_every_arch_beam_searches_as_fairseqs_own_path(tiny_data_bin, family, fused_steps):
    """fairseq's SequenceGenerator (beam 3, as fairseq-generate prepares the model) on the same
    parameters: the same hypotheses, scores within float rounding, the fused steps taken."""
    from fairseq.sequence_generator import SequenceGenerator

    results = []
    for flags in ((), ("--fused-attention",)):
        model, task, _ = build(tiny_data_bin, family, *TINY_MODEL, *flags)
        model.eval()
        model.make_generation_fast_(need_attn=False)  # fairseq-generate without --print-alignment
        generator = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=12)
        sample = batch(task, n=6)
        with torch.no_grad():
            results.append(generator.generate([model], sample))
    stock, fused = results
    # 2 decoder layers: per step both self-attentions and the first layer's encoder-decoder
    # attention; the last layer's (fairseq's alignment layer, asked for per-head weights) is fairseq's
    assert len(fused_steps) > 0 and len(fused_steps) % 3 == 0
    for hyps_stock, hyps_fused in zip(stock, fused):
        assert [h["tokens"].tolist() for h in hyps_fused] == [h["tokens"].tolist() for h in hyps_stock]
        torch.testing.assert_close(
            torch.stack([h["score"] for h in hyps_fused]), torch.stack([h["score"] for h in hyps_stock])
        )


def test_a_trained_model_resumes_across_the_switch_and_translates_alike(tiny_data_bin, tmp_path, fused_steps):
    """fairseq-train 60 updates on fairseq's path (shared source / target embeddings), then 40
    more from that checkpoint with and without --fused-attention: the same losses; fairseq-generate
    (beam 5) with the option through --model-overrides gives the same translations."""
    raw, data = tiny_data_bin.parent, tmp_path / "joined"
    splits = [f"--{split}pref={raw / split}" for split in ("train", "valid", "test")]
    # fairseq's commands in this process (their cli_main): what is tested is the option, not a process
    joined = ("-s", "src", "-t", "tgt", *splits, "--destdir", data, "--joined-dictionary")
    run_cli("fairseq-preprocess", *joined, in_process=True)

    def train(save_dir, updates, *flags):
        out = run_cli(
            "fairseq-train",
            data,
            "--user-dir",
            PLUGIN_DIR,
            "--arch",
            "transformer_preln",
            *TINY_MODEL,
            "--share-all-embeddings",
            *("--optimizer", "adam", "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10"),
            *("--max-tokens", "1000", "--max-update", updates, "--seed", "1", "--cpu", "--no-epoch-checkpoints"),
            *("--save-dir", save_dir, "--log-format", "json", "--log-interval", "1", "--no-progress-bar", *flags),
            in_process=True,
        )
        return [float(r["loss"]) for r in json_records(out, "train_inner")]

    assert len(train(tmp_path / "stock", 60)) == 60
    shutil.copytree(tmp_path / "stock", tmp_path / "fused")
    stock, fused = train(tmp_path / "stock", 100), train(tmp_path / "fused", 100, "--fused-attention")
    assert len(stock) == len(fused) == 40 and stock[-1] < stock[0]
    assert fused == pytest.approx(stock, abs=2e-3)  # logged to 3 decimals

    def generate(*flags):
        out = run_cli(
            "fairseq-generate",
            data,
            "--user-dir",
            PLUGIN_DIR,
            *("--path", tmp_path / "stock" / "checkpoint_last.pt", "--gen-subset", "test", "--beam", "5"),
            *("--batch-size", "16", "--cpu", *flags),
        )
        hypotheses = sorted(line.split("\t") for line in out.splitlines() if line.startswith("H-"))
        assert len(hypotheses) == 40
        return [(h[0], h[2]) for h in hypotheses], [float(h[1]) for h in hypotheses]

    (expected, expected_scores), (translations, scores) = (
        generate(),
        generate("--model-overrides", "{'fused_attention': True}"),
    )
    assert translations == expected
    assert scores == pytest.approx(expected_scores, abs=2e-4)  # printed to 4 decimals

    # the decoding benchmark in process (the same arg_overrides as --model-overrides): the fused
    # steps taken, the same best hypothesis for every sentence
    sys.path.insert(0, str(REPO / "benchmarks"))
    import decoding

    argv = ["--path", str(tmp_path / "stock" / "checkpoint_last.pt"), "--data", str(data), "--reps", "1"]
    result = decoding.main([*argv, "--batch-size", "16", "--threads", "1", "--device", "cpu"])
    assert result["same"] == result["sentences"] == 40 and len(result["ratios"]) == 1
    assert fused_steps  # the override built FusedAttention layers, and decoding used them
