"""configs/librispeech: the B2T paper's speech recognition (Sec. 6.4, Table 4) as recipes, their
WER from ``fairseq-ln-evaluate`` and ``fairseq-ln-table`` beside the paper's, end to end on real
recordings prepared by ``fairseq-ln-prepare librispeech`` (the ``speech_data`` fixture)."""

import json
import subprocess

import editdistance
import pytest
from conftest import BIN, SHARED_DATA
from test_recipes import parsed

from fairseq_layernorm_plugins.experiments.curves import read_log_curves
from fairseq_layernorm_plugins.recipes.config import list_recipes, load_recipe
from fairseq_layernorm_plugins.runs.launch import Launch

B2T_PAPER = SHARED_DATA.parent / "papers" / "b2t-takase2023-layer-norms-residuals.txt"
ROWS = {"Post-LN": "postln", "Pre-LN": "preln", "B2T connection": "b2t"}  # Table 4's rows: our recipes
SETS = ["dev-clean", "dev-other", "test-clean", "test-other"]  # Table 4's columns


def paper_wer_table(text):
    """{recipe: {depth: {set: WER} or "failed"}} read from the B2T paper's Table 4."""
    block = text[text.index("Table 4: Word error rates") :].split("\n\n")[1]
    numbers, depth = {}, None
    for line in block.splitlines():
        if line.startswith("Enc-Dec: "):
            depth = line.split()[1]
        name, _, rest = line.partition("\t")
        if name in ROWS:
            value = "failed" if "failed" in rest else dict(zip(SETS, map(float, rest.split())))
            numbers.setdefault(ROWS[name], {})[depth] = value
    return numbers


def test_librispeech_recipes_carry_the_papers_table_4():
    if not B2T_PAPER.is_file():
        pytest.skip(f"{B2T_PAPER}: not here (../shared/papers)")
    table = paper_wer_table(B2T_PAPER.read_text(encoding="utf-8"))
    assert sorted(table) == sorted(n.split("/")[1] for n in list_recipes() if n.startswith("librispeech/"))
    assert table["postln"]["12L-6L"] == "failed" and table["b2t"]["12L-6L"]["test-other"] == 7.68
    for method, numbers in table.items():
        recipe = load_recipe(f"librispeech/{method}")
        assert recipe.data["paper"]["wer"] == numbers and recipe.depths == ["6L-6L", "12L-6L"], method


@pytest.mark.parametrize("method", ["postln", "preln", "b2t"])
def test_librispeech_recipes_are_table_7(speech_data, method):
    """Table 7's ASR column and Table 8's 32 GPUs: s2t_transformer_m's d 512, FFN 2048, 8 heads,
    Adam (0.9, 0.98), lr 1e-3, inverse sqrt with 4k warm-up, 150k updates, 40k frames per GPU;
    the method's LayerNorm placement; trained on the three training sets, scored by WER."""
    for depth, layers in (("6L-6L", [6, 6]), ("12L-6L", [12, 6])):
        recipe = load_recipe(f"librispeech/{method}").with_depth(depth)
        assert recipe.tokens_per_update == 32 * 40000
        args = parsed(Launch(recipe, str(speech_data), "/tmp/unused", gpus=32), speech_data)
        assert args.arch == f"s2t_transformer_{method}_m" and [args.encoder_layers, args.decoder_layers] == layers
        assert (args.encoder_embed_dim, args.encoder_ffn_embed_dim, args.encoder_attention_heads) == (512, 2048, 8)
        assert (args.lr, args.lr_scheduler, args.warmup_updates, args.max_update) == (
            [1e-3],
            "inverse_sqrt",
            4000,
            150000,
        )
        assert (args.max_tokens, args.update_freq, args.adam_betas, args.fp16) == (40000, [1], "(0.9, 0.98)", False)
        assert args.encoder_normalize_before is (method == "preln") is args.decoder_normalize_before
        assert args.train_subset == "train-clean-100,train-clean-360,train-other-500"
        assert recipe.data["generate"]["subsets"] == SETS and recipe.data["paper"]["compare"] == "wer"


def test_a_dry_run_prints_table_4_beside_the_command(capsys):
    from fairseq_layernorm_plugins import cli

    cli.train(["librispeech/b2t", "--depth", "12L-6L", "--dry-run", "--gpus", "32", "--data", "/data"])
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[1].endswith("dev-clean 3.26, dev-other 7.74, test-clean 3.48, test-other 7.68")
    assert "--task speech_to_text" in printed[2] and "--arch s2t_transformer_b2t_m" in printed[2]
    cli.train(["librispeech/postln", "--depth", "12L-6L", "--dry-run", "--gpus", "32", "--data", "/data"])
    assert capsys.readouterr().out.splitlines()[1].endswith(": failed")


def test_a_run_on_data_without_its_sets_is_refused_before_writing(speech_data, tmp_path):
    """The recipe trains on the three training sets; data prepared with one is refused in one
    line before a run folder exists, unless the sets are named after --."""
    runs = tmp_path / "runs"
    refused = subprocess.run(
        [BIN / "fairseq-ln-train", "librispeech/b2t", "--data", speech_data, "--runs", runs, "--cpu-workers", "1"],
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and not runs.exists()
    assert refused.stderr.strip() == (
        f"error: --data {speech_data}: no train-clean-360.tsv, train-other-500.tsv (prepared without it: name the "
        "sets to train and validate on after --, e.g. -- --train-subset train-clean-100 --valid-subset dev-clean)"
    )


def test_speech_end_to_end_train_evaluate_table(speech_data, tmp_path, capsys):
    """The path a user takes on prepared LibriSpeech-layout data: fairseq-ln-train librispeech/b2t
    (6L-6L narrowed for a few updates), fairseq-ln-evaluate (fairseq-generate --scoring wer on the
    four sets), fairseq-ln-table. Each set's WER is recomputed here from the hypotheses it wrote
    and the manifest's transcripts."""
    runs = tmp_path / "runs"
    narrow = ["--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64"]
    narrow += ["--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]
    narrow += ["--conv-channels", "32", "--encoder-layers", "2", "--decoder-layers", "2"]
    train = subprocess.run(
        [BIN / "fairseq-ln-train", "librispeech/b2t", "--data", speech_data, "--runs", runs, "--cpu-workers", "1"]
        + ["--", "--max-update", "6", "--update-freq", "1", "--max-tokens", "3000", "--warmup-updates", "2"]
        + ["--train-subset", "train-clean-100", "--valid-subset", "dev-clean", *narrow],
        capture_output=True,
        text=True,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    run = runs / "librispeech" / "b2t" / "6L-6L.seed1"
    curves = read_log_curves(run / "train.log")  # fairseq tags the validation "dev-clean"
    dev_clean = [
        json.loads(line.split("| dev-clean | ", 1)[1])
        for line in (run / "train.log").read_text().splitlines()
        if "| dev-clean | {" in line
    ]
    assert [v["nll_loss"] for v in curves["valid"]] == [float(r["dev-clean_nll_loss"]) for r in dev_clean] != []
    evaluated = subprocess.run([BIN / "fairseq-ln-evaluate", run], capture_output=True, text=True)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    result = json.loads((run / "results.json").read_text())
    assert result["task"] == "speech_to_text" and list(result["wer"]) == SETS and "bleu" not in result
    for subset in SETS:
        rows = [line.split("\t") for line in (speech_data / f"{subset}.tsv").read_text().splitlines()[1:]]
        references = [row[3] for row in rows]
        hypotheses = (run / f"{subset}.hyp.txt").read_text().splitlines()
        assert len(hypotheses) == len(references) == result["wer"][subset]["utterances"]
        errors = sum(editdistance.eval(r.split(), h.split()) for r, h in zip(references, hypotheses))
        words = sum(len(r.split()) for r in references)
        assert (result["wer"][subset]["errors"], result["wer"][subset]["words"]) == (errors, words)
        assert result["wer"][subset]["score"] == pytest.approx(100 * errors / words, abs=0.005)
        assert f"{subset} WER {result['wer'][subset]['score']:.2f}" in evaluated.stdout

    out = tmp_path / "table"
    table = subprocess.run(
        [BIN / "fairseq-ln-table", runs, "--table", "librispeech", "--out", out], capture_output=True, text=True
    )
    assert table.returncode == 0, table.stderr[-3000:]
    assert out.with_suffix(".png").is_file()
    line = next(row for row in out.with_suffix(".md").read_text().splitlines() if row.startswith("| b2t |"))
    paper = (3.69, 8.97, 3.86, 8.94)
    cells = [
        f"{result['wer'][s]['score']:.2f} (1) | {p:.2f} | {result['wer'][s]['score'] - p:+.2f}"
        for s, p in zip(SETS, paper)
    ]
    assert line == "| b2t | " + " | ".join(cells) + " |"

    from fairseq_layernorm_plugins import cli  # the sets a stand-in corpus has: --subset

    cli.evaluate([str(run), "--subset", "test-clean"])
    assert list(json.loads((run / "results.json").read_text())["wer"]) == ["test-clean"]
    with pytest.raises(SystemExit):
        cli.evaluate([str(run), "--subset", "test-clean,train-other-500"])
    assert "no train-other-500.tsv (prepared without them; --subset)" in capsys.readouterr().err


def generate_log(tmp_path, lines, wer):
    log = tmp_path / "generate.log"
    log.write_text("\n".join([*lines, f"Generate test-clean with beam=5: WER: {wer:.2f}"]) + "\n")
    return log


def test_decoded_lines_are_read_in_utterance_order_and_recounted(tmp_path):
    """runs/wer.py on fairseq-generate's lines as it writes them (batches out of order): the
    hypotheses in utterance order; fairseq's WER must be the errors over the reference words."""
    from fairseq_layernorm_plugins.runs.wer import read_decoded

    lines = ["T-1\tthe cat sat", "H-1\t-0.5\t▁the ▁cat ▁sat", "D-1\t-0.5\tthe cat sat"]
    lines += ["T-0\ta b c d", "H-0\t-0.7\t▁a ▁b", "D-0\t-0.7\ta b x d e"]  # 1 substitution, 1 insertion
    hypotheses, wer, errors, words = read_decoded(generate_log(tmp_path, lines, 200 / 7), 2)
    assert hypotheses == ["a b x d e", "the cat sat"] and (errors, words) == (2, 7) and wer == 28.57
    with pytest.raises(ValueError, match="is not 2 errors / 7 words"):
        read_decoded(generate_log(tmp_path, lines, 200 / 7 + 0.02), 2)
    with pytest.raises(ValueError, match="1 hypotheses for the 2 utterances"):
        read_decoded(generate_log(tmp_path, lines[:2] + lines[3:], 200 / 7), 2)
    with pytest.raises(ValueError, match="2 hypotheses for the 3 utterances"):
        read_decoded(generate_log(tmp_path, lines, 200 / 7), 3)
    (tmp_path / "generate.log").write_text("\n".join(lines))
    with pytest.raises(ValueError, match="no 'WER:' line"):
        read_decoded(tmp_path / "generate.log", 2)
