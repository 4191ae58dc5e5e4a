"""Evaluate a speech-recognition run (``--task speech_to_text``, ``configs/librispeech``): its
checkpoint chosen by the recipe's protocol (``generate: average_last: N``, the mean of the last
N epoch checkpoints, as fairseq's LibriSpeech example; or ``checkpoint: best``), decoded by
fairseq-generate with the recipe's beam on each of ``generate.subsets`` (LibriSpeech's
dev-clean, dev-other, test-clean, test-other, the B2T paper's Table 4 columns) and scored by
fairseq's own ``--scoring wer``.

WER, as fairseq computes it: the word-level edit distance between each hypothesis and its
reference, summed over the set, over the number of reference words, in percent. Both sides are
the text after SentencePiece is undone, split on spaces, with none of fairseq's optional
normalisation (``--wer-tokenizer none``, no punctuation removal, case kept): LibriSpeech's
transcripts, lower-cased by ``fairseq-ln-prepare librispeech``, have no punctuation. The errors
and words are counted again here from the decoded lines (``editdistance``, as fairseq's scorer)
and must give fairseq's number. Results are written as results.json beside the run, as
``evaluate.py`` writes a translation run's.
"""

import re
from pathlib import Path

import torch

from fairseq_layernorm_plugins.atomic import write_json
from fairseq_layernorm_plugins.prepare.textio import write_lines
from fairseq_layernorm_plugins.runs.checkpoints import chosen_checkpoint
from fairseq_layernorm_plugins.runs.launch import BIN, PLUGIN_DIR, run_logged, run_save_dir

SUBSETS = ("dev-clean", "dev-other", "test-clean", "test-other")  # B2T Table 4's columns
LABEL = "WER (%), fairseq --scoring wer: words split on spaces after SentencePiece, no other normalisation"
_WER = re.compile(r"WER: ([\d.]+)")


def decoded_lines(log, kind):
    """{utterance index: text} of fairseq-generate's lines of ``kind`` (``D``: the hypothesis
    after SentencePiece is undone, ``T``: the reference) in ``log``."""
    lines = {}
    for line in Path(log).read_text(encoding="utf-8").splitlines():
        if line.startswith(f"{kind}-"):
            fields = line.split("\t")
            lines[int(fields[0][len(kind) + 1 :])] = fields[-1] if len(fields) > 1 else ""
    return lines


def word_errors(hypotheses, references):
    """(errors, reference words): the summed word-level edit distance (fairseq's WerScorer)."""
    import editdistance  # the speech extra's, as fairseq's scorer imports it

    errors = sum(editdistance.eval(ref.split(), hyp.split()) for hyp, ref in zip(hypotheses, references))
    return errors, sum(len(ref.split()) for ref in references)


def read_decoded(log, utterances):
    """(hypotheses in utterance order, fairseq's WER, errors, words) of fairseq-generate's log
    ``log`` of a set of ``utterances``: every utterance decoded once, and the errors and words
    counted again from its lines giving fairseq's WER (to its two decimals); else ValueError."""
    reported = _WER.findall(Path(log).read_text(encoding="utf-8", errors="replace"))
    if not reported:
        raise ValueError(f"{log}: no 'WER:' line from fairseq-generate")
    hyps, refs = decoded_lines(log, "D"), decoded_lines(log, "T")
    order = sorted(refs)
    if order != list(range(utterances)) or sorted(hyps) != order:
        raise ValueError(f"{log}: {len(hyps)} hypotheses for the {utterances} utterances of the set")
    hypotheses = [hyps[i] for i in order]
    errors, words = word_errors(hypotheses, [refs[i] for i in order])
    if abs(100 * errors / max(words, 1) - float(reported[-1])) > 0.005 + 1e-9:
        raise ValueError(f"{log}: fairseq's WER {reported[-1]} is not {errors} errors / {words} words")
    return hypotheses, float(reported[-1]), errors, words


def score_wer(run, out_dir, checkpoint, subset, max_tokens=50000, cpu=None):
    """fairseq-generate ``--scoring wer`` of ``checkpoint`` on ``subset`` of the run's data (its
    log and hypotheses in ``out_dir``): {"score", "errors", "words", "utterances", "label"}."""
    gen = run.get("generate", {})
    cpu = (not torch.cuda.is_available()) if cpu is None else cpu
    cmd = [BIN / "fairseq-generate", run["data"], "--user-dir", PLUGIN_DIR, "--task", "speech_to_text"]
    cmd += ["--config-yaml", run.get("config_yaml") or "config.yaml", "--path", checkpoint, "--gen-subset", subset]
    cmd += ["--beam", gen.get("beam", 5), "--max-tokens", max_tokens, "--scoring", "wer", *(["--cpu"] if cpu else [])]
    log = Path(out_dir) / f"generate-{subset}.log"
    log.unlink(missing_ok=True)
    run_logged(cmd, log, f"{run['recipe']} generate {subset}", echo=lambda line: "WER:" in line)
    utterances = tsv_rows(Path(run["data"]) / f"{subset}.tsv")
    hypotheses, wer, errors, words = read_decoded(log, utterances)
    write_lines(Path(out_dir) / f"{subset}.hyp.txt", hypotheses)
    return {"score": wer, "errors": errors, "words": words, "utterances": utterances, "label": LABEL}


def tsv_rows(path):
    """The utterances a fairseq speech_to_text manifest lists (its lines after the header)."""
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip()) - 1


def evaluate_asr(run_dir, run, average_last=None, max_tokens=50000, cpu=None, echo=print, subsets=None):
    """Evaluate the speech-recognition run in ``run_dir`` (its run.json: ``run``) by its recipe's
    protocol on ``subsets`` (default: the recipe's ``generate.subsets``, else :data:`SUBSETS`);
    returns and writes results.json."""
    run_dir = Path(run_dir)
    save_dir = run_save_dir(run_dir, run)
    gen = run.get("generate", {})
    checkpoint, checkpoints, protocol = chosen_checkpoint(run_dir, save_dir, gen, average_last)
    subsets = subsets or gen.get("subsets", SUBSETS)
    missing = [name for name in subsets if not (Path(run["data"]) / f"{name}.tsv").is_file()]
    if missing:
        raise ValueError(f"{run['data']}: no {', '.join(f'{name}.tsv' for name in missing)} (prepared without them; --subset)")
    scores = {subset: score_wer(run, run_dir, checkpoint, subset, max_tokens, cpu) for subset in subsets}
    result = {
        "recipe": run["recipe"],
        "depth": run.get("depth"),
        "run_dir": str(run_dir),
        "task": "speech_to_text",
        "checkpoints": [str(p) for p in checkpoints],
        "protocol": protocol,
        "beam": gen.get("beam", 5),
        "wer": scores,
        "headline": subsets[-1],
        "paper": run.get("paper"),
    }
    write_json(run_dir / "results.json", result)
    for subset, value in scores.items():
        echo(f"{run['recipe']} {run.get('depth')}: {subset} WER {value['score']:.2f} ({value['words']:,} words)")
    return result
