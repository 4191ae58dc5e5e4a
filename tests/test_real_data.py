"""End to end on real IWSLT14 data from ../shared/data (skipped when it is absent)."""

import re

import pytest
from conftest import PLUGIN_DIR, assert_bleu_line_is_sacrebleu, generated, json_records, run_cli, shared_data
from sacrebleu.metrics import BLEU
from subword_nmt.apply_bpe import BPE

from fairseq_layernorm_plugins.prepare.iwslt14_mini import prepare
from fairseq_layernorm_plugins.prepare.subwords import remove_bpe
from fairseq_layernorm_plugins.prepare.textio import read_lines


def test_iwslt14_mini_train_generate_bleu(tmp_path):
    iwslt = shared_data("iwslt14")
    summary = prepare(iwslt, tmp_path / "mini", test_lines=100)
    assert summary["sizes"] == {"train": 14981, "valid": 911, "test": 100}
    # one segmentation everywhere: every training line is a fixed point of the shared codes
    with open(iwslt / "fairseq_iwslt14.tokenized.de-en" / "code", encoding="utf-8") as codes:
        bpe = BPE(codes)
    for lang in ("de", "en"):
        train = read_lines(tmp_path / "mini" / f"train.{lang}")
        assert all(bpe.process_line(remove_bpe(line)) == line for line in train[::20])
        dictionary = read_lines(tmp_path / "mini" / "bin" / f"dict.{lang}.txt")
        assert len(dictionary) < 8000, "a second segmentation would inflate the dictionary"
    references = read_lines(tmp_path / "mini" / "test.tok.en")
    official = read_lines(iwslt / "fairseq_iwslt14.tokenized.de-en" / "test.en")
    assert references == [remove_bpe(line) for line in official[::67][:100]]

    save = tmp_path / "ckpt"
    log = run_cli(
        "fairseq-train",
        tmp_path / "mini" / "bin",
        "--user-dir",
        PLUGIN_DIR,
        "--arch",
        "transformer_preln_iwslt_de_en",
        "--share-decoder-input-output-embed",
        "--encoder-layers",
        "1",
        "--decoder-layers",
        "1",
        "--encoder-embed-dim",
        "64",
        "--decoder-embed-dim",
        "64",
        "--encoder-ffn-embed-dim",
        "128",
        "--decoder-ffn-embed-dim",
        "128",
        "--optimizer",
        "radam",
        "--adam-betas",
        "(0.9, 0.98)",
        "--lr",
        "3e-3",
        "--lr-scheduler",
        "epoch_decay_nowarmup",
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--max-tokens",
        "2048",
        "--max-update",
        "30",
        "--cpu",
        "--seed",
        "1",
        "--save-dir",
        save,
        "--no-epoch-checkpoints",
        "--log-format",
        "json",
        "--log-interval",
        "5",
        "--no-progress-bar",
        "--disable-validation",
    )
    losses = [float(r["loss"]) for r in json_records(log, "train_inner")]
    assert losses[-1] < losses[0] - 1.0, losses

    out = run_cli(
        "fairseq-generate",
        tmp_path / "mini" / "bin",
        "--user-dir",
        PLUGIN_DIR,
        "--path",
        save / "checkpoint_last.pt",
        "--gen-subset",
        "test",
        "--beam",
        "2",
        "--max-tokens",
        "4000",
        "--remove-bpe",
        "--cpu",
    )
    hypotheses, targets = generated(out, "H"), generated(out, "T")
    assert sorted(hypotheses) == sorted(targets) == list(range(100))
    # the data-bin's test targets as fairseq reads them (BPE removed) are test.tok.en line for line,
    # but where a subword is not in the dictionary (<<unk>>: part of a word, or a word and its @@)
    for i, reference in enumerate(references):
        pattern = ".*?".join(re.escape(part.strip()) for part in targets[i].split("<<unk>>"))
        assert re.fullmatch(pattern, reference), (i, targets[i], reference)
    # fairseq's own score line is sacreBLEU on its hypotheses and targets; against test.tok.en the
    # hypotheses score the same but for the <<unk>> words (a word count may differ by one per line)
    fairseq_bleu = assert_bleu_line_is_sacrebleu(out)
    ours = BLEU(tokenize="none", smooth_method="none").corpus_score([hypotheses[i] for i in range(100)], [references])
    unk_lines = sum("<<unk>>" in t for t in targets.values())
    assert ours.sys_len == fairseq_bleu.sys_len and abs(ours.ref_len - fairseq_bleu.ref_len) <= unk_lines
    assert ours.precisions[0] == pytest.approx(fairseq_bleu.precisions[0], abs=0.5) and ours.precisions[0] > 1
