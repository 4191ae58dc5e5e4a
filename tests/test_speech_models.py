"""Speech-to-text models of every method (``s2t_transformer_<method>``, fairseq's
``speech_to_text`` task): which methods have one, where the LayerNorms sit, the B2T connection
recomputed over the subsampled frames, Pre-LN against fairseq's own ``s2t_transformer``, and
every registered one trained, resumed and decoded with ``--scoring wer`` on real recordings
prepared by ``fairseq-ln-prepare librispeech`` (the ``speech_data`` fixture)."""

import re

import editdistance
import pytest
import torch
from conftest import PLUGIN_DIR, SPEECH_SPLITS, build, generated, hand_set_layer_norms, json_records, parse, run_cli
from conftest import plugin_archs as registered
from fairseq.checkpoint_utils import load_checkpoint_to_cpu
from fairseq.data.data_utils import lengths_to_padding_mask
from fairseq.models import MODEL_REGISTRY

from fairseq_layernorm_plugins.methods import METHODS
from fairseq_layernorm_plugins.models.base_s2t import NOT_FOR_SPEECH, S2T_ARCH_SIZES, S2T_FAMILIES

S2T_ARCHS = registered("s2t")
FAMILIES = sorted(set(S2T_ARCHS.values()))  # one per method: its base arch has the model's name
TRAIN, VALID, TEST = SPEECH_SPLITS[:3]
TASK = ["--task", "speech_to_text", "--config-yaml", "config.yaml"]
TINY_S2T = [*TASK, "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32"]
TINY_S2T += ["--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64"]
TINY_S2T += ["--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--conv-channels", "32"]


def build_s2t(data, arch, *flags, seed=1):
    model, task, args = build(data, arch, *TINY_S2T, *flags, seed=seed)
    return model.eval(), task, args


def speech_batch(task, split=TEST):
    task.load_dataset(split)
    dataset = task.dataset(split)
    return dataset.collater([dataset[i] for i in range(len(dataset))])


def test_every_method_but_the_refused_registers_a_speech_model_of_every_size():
    assert {m.s2t_model for m in METHODS.values() if m.s2t_model} == set(FAMILIES)
    assert {m.name for m in METHODS.values() if m.s2t_model is None} == set(NOT_FOR_SPEECH)
    for family in FAMILIES:
        assert {family + size for size in S2T_ARCH_SIZES} <= set(S2T_ARCHS)
    assert METHODS["b2t"].s2t_arch("_m") == "s2t_transformer_b2t_m" and METHODS["preln"].s2t_arch() in S2T_ARCHS
    for name, why in NOT_FOR_SPEECH.items():
        with pytest.raises(ValueError, match=re.escape(f"method {name!r} has no speech-to-text model: {why}")):
            METHODS[name].s2t_arch()


@pytest.mark.parametrize("family", FAMILIES)
def test_where_the_layer_norms_sit(speech_data, family):
    """fairseq's s2t_transformer sizes are all Pre-LN; each plugin size keeps the method's
    placement: Post-LN has no final LayerNorm on either stack, Pre-LN ends each with one. The
    layers are the method's, behind fairseq's own convolutional subsampler."""
    post_ln = S2T_FAMILIES[family].normalize_before is False
    for size in ("", "_s", "_m"):
        args = parse(speech_data, family + size, *TASK)
        assert args.encoder_normalize_before is not post_ln, size
        assert args.decoder_normalize_before is not post_ln, size
    model, _, _ = build_s2t(speech_data, family)
    model_cls = MODEL_REGISTRY[family]
    assert type(model.encoder.subsample).__name__ == "Conv1dSubsampler"
    assert [type(layer) for layer in model.encoder.transformer_layers] == [model_cls.encoder_layer_cls] * 2
    assert [type(layer) for layer in model.decoder.layers] == [model_cls.decoder_layer_cls] * 2
    if family == "s2t_transformer_residual":  # the output joins the two streams
        assert type(model.encoder.layer_norm).__name__ == "DualOutput"
    else:
        assert (model.encoder.layer_norm is None) is post_ln
        assert (model.decoder.layer_norm is None) is post_ln


def dropout_names(model):
    from fairseq.modules import FairseqDropout

    return [(name, m.module_name) for name, m in model.named_modules() if isinstance(m, FairseqDropout)]


@pytest.mark.parametrize("flags", [[], ["--criterion", "label_smoothed_cross_entropy_with_ctc", "--ctc-weight", "0.3"]])
def test_preln_is_fairseqs_s2t_transformer(speech_data, flags):
    """Pre-LN (fairseq's initialisation by default for speech) is stock ``s2t_transformer_s``: the
    same modules and dropout names, the same parameters from the same seed (a CTC projection
    included), the same output."""
    ours, task, args = build_s2t(speech_data, "s2t_transformer_preln_s", *flags, seed=3)
    stock, _, _ = build_s2t(speech_data, "s2t_transformer_s", *flags, seed=3)
    assert args.init_style == "fairseq" and (ours.encoder.ctc_proj is not None) is bool(flags)
    assert [name for name, _ in ours.named_modules()] == [name for name, _ in stock.named_modules()]
    assert dropout_names(ours) == dropout_names(stock)  # --retain-dropout-modules takes stock names
    theirs = stock.state_dict()
    assert ours.state_dict().keys() == theirs.keys()
    for key, value in ours.state_dict().items():
        torch.testing.assert_close(value, theirs[key], rtol=0, atol=0, msg=key)
    net_input = speech_batch(task)["net_input"]
    with torch.no_grad():
        torch.testing.assert_close(ours(**net_input)[0], stock(**net_input)[0], rtol=0, atol=0)


def test_b2t_speech_encoder_is_eq5_over_the_subsampled_frames(speech_data):
    """B2T Eq. 5 in every layer of the speech encoder, recomputed from fairseq's subsampler on:
    h = LN1(x + SelfAttn(x)), out = LN2(x + h + FFN(h)), no LayerNorm after the last layer."""
    model, task, _ = build_s2t(speech_data, "s2t_transformer_b2t_s")
    encoder = hand_set_layer_norms(model).encoder
    net_input = speech_batch(task)["net_input"]
    with torch.no_grad():
        x, lengths = encoder.subsample(net_input["src_tokens"], net_input["src_lengths"])
        mask = lengths_to_padding_mask(lengths)
        x = encoder.embed_scale * x + encoder.embed_positions(mask).transpose(0, 1)
        for layer in encoder.transformer_layers:
            attn = layer.self_attn(query=x, key=x, value=x, key_padding_mask=mask, need_weights=False)[0]
            h = layer.self_attn_layer_norm(x + attn)
            x = layer.final_layer_norm(x + h + layer.fc2(torch.relu(layer.fc1(h))))
        out = encoder(net_input["src_tokens"], net_input["src_lengths"])["encoder_out"][0]
    assert mask.any(), "the batch should hold utterances of different lengths"
    keep = ~mask.t().unsqueeze(-1)  # padded frames are not compared
    torch.testing.assert_close(out * keep, x * keep)


def test_torchscript_is_refused_in_one_line_as_stock_s2t_fails(speech_data):
    model, _, _ = build_s2t(speech_data, "s2t_transformer_b2t_s")
    with pytest.raises(RuntimeError, match="fairseq's speech encoder is not scriptable"):
        torch.jit.script(model)
    stock, _, _ = build_s2t(speech_data, "s2t_transformer_s")
    with pytest.raises(RuntimeError, match="return_all_hiddens"):
        torch.jit.script(stock)


def train_command(data, arch, save_dir, *flags):
    return [
        data,
        *TINY_S2T,
        *("--arch", arch, "--user-dir", PLUGIN_DIR, "--train-subset", TRAIN, "--valid-subset", VALID),
        *("--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"),
        *("--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "3000", "--seed", "1", "--cpu"),
        *("--save-dir", save_dir, "--no-epoch-checkpoints", "--log-format", "json", "--log-interval", "1"),
        *flags,
    ]


def decode(data, checkpoint, *flags):
    return run_cli(
        "fairseq-generate",
        data,
        *TASK,
        *("--user-dir", PLUGIN_DIR, "--gen-subset", TEST, "--path", checkpoint, "--max-tokens", "3000"),
        *("--beam", "2", "--max-len-b", "40", "--scoring", "wer", "--cpu", *flags),
    )


def assert_wer_line_is_recomputed(out):
    """fairseq's ``--scoring wer`` line: the word edit distance of the detokenised hypotheses
    (``D-``) against the references (``T-``), over the reference words, in percent."""
    hyps, refs = generated(out, "D"), generated(out, "T")
    errors = sum(editdistance.eval(hyps[i].split(), refs[i].split()) for i in refs)
    words = sum(len(refs[i].split()) for i in refs)
    line = next(line for line in out.splitlines() if "WER:" in line)
    assert float(line.rsplit("WER:", 1)[1]) == pytest.approx(100 * errors / words, abs=0.01)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_speech_model_trains_resumes_and_decodes(speech_data, tmp_path, family):
    """fairseq-train on real recordings, 2 updates and then resumed to 4 from its checkpoint;
    fairseq-generate decodes every test utterance (the last batch kept) and scores it by WER."""
    save = tmp_path / "checkpoints"
    run_cli("fairseq-train", *train_command(speech_data, family + "_s", save), "--max-update", "2", in_process=True)
    out = run_cli(
        "fairseq-train", *train_command(speech_data, family + "_s", save), "--max-update", "4", in_process=True
    )
    assert re.search(r"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ 2 updates\)", out)
    assert [r["num_updates"] for r in json_records(out, "train_inner")] == ["3", "4"]
    state = load_checkpoint_to_cpu(str(save / "checkpoint_last.pt"))
    test_utterances = len((speech_data / f"{TEST}.tsv").read_text().splitlines()) - 1
    decoded = decode(speech_data, save / "checkpoint_last.pt")
    assert len(generated(decoded, "H")) == test_utterances
    assert_wer_line_is_recomputed(decoded)
    if family == "s2t_transformer_admin":  # omega profiled on the first batch, kept by the checkpoint
        omegas = [v for k, v in state["model"].items() if k.startswith("encoder.transformer_layers.") and "omega" in k]
        assert len(omegas) == 2 and all((omega != 1).any() for omega in omegas)


def test_fairseqs_own_s2t_transformer_decodes_every_utterance_under_the_plugin(speech_data, tmp_path):
    """Stock ``s2t_transformer_s`` with ``--user-dir``: its checkpoint loads under torch's safe
    loading and every test utterance is decoded (fairseq alone drops the last batch)."""
    save = tmp_path / "checkpoints"
    run_cli(
        "fairseq-train", *train_command(speech_data, "s2t_transformer_s", save), "--max-update", "2", in_process=True
    )
    test_utterances = len((speech_data / f"{TEST}.tsv").read_text().splitlines()) - 1
    decoded = decode(speech_data, save / "checkpoint_last.pt", "--required-batch-size-multiple", "8")
    assert len(generated(decoded, "H")) == test_utterances


def test_usage_speech_commands_run_as_written(speech_data, tmp_path):
    """docs/usage.md's speech block, fairseq-train then fairseq-generate --scoring wer, as pasted
    but for the data (the fixture's one training set) and a tiny model for 2 updates."""
    from test_cli_e2e import DOC_TINY, run_usage_block, usage_block

    block = usage_block("## Speech recognition")
    replacements = {
        "fairseq-ln-prepare librispeech": ":",
        "data/librispeech": speech_data,
        "train-clean-100,train-clean-360,train-other-500": TRAIN,
        "dev-clean,dev-other": VALID,
    }
    out = run_usage_block(block, replacements, DOC_TINY["fairseq-train"] + " --conv-channels 32 --cpu", tmp_path)
    assert "done training" in out and "s2t_transformer_b2t_m" in out
    test_utterances = len((speech_data / "test-other.tsv").read_text().splitlines()) - 1
    assert len(generated(out, "H")) == test_utterances and "WER:" in out
