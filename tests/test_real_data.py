"""End to end on real IWSLT14 data from ../shared/data (skipped when it is absent)."""

import sacrebleu
from conftest import PLUGIN_DIR, json_records, run_cli, shared_data
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
    hyps = {int(line.split("\t")[0][2:]): line.split("\t")[2] for line in out.splitlines() if line.startswith("H-")}
    assert sorted(hyps) == list(range(100))
    bleu = sacrebleu.corpus_bleu([hyps[i] for i in range(100)], [references], tokenize="none")
    assert 0 <= bleu.score <= 100 and bleu.sys_len > 0
