"""Evaluate a run: average its last N checkpoints, translate the test set with the
recipe's decoding settings, and score it three ways, each labelled as what it is (a language
model's run is scored by its perplexity instead: ``perplexity.py``; a speech-recognition run by
its WER: ``wer.py``):

* ``sacrebleu``: detokenised SacreBLEU against the untokenised references, with its
  signature (the headline for WMT14; lowercased for IWSLT14, whose data is lowercased);
* ``tokenized``: BLEU on Moses-tokenised text against the tokenised references (the
  IWSLT14 convention, no SacreBLEU test set exists for it);
* ``compound_split``: tokenised BLEU after fairseq's ``compound_split_bleu.sh`` hyphen
  rewrite (``a-b`` -> ``a ##AT##-##AT## b``), for comparison with older WMT14 papers.

A recipe whose ``generate.test_sets`` names several test sets (the B2T paper's
newstest2010-2016) has each scored the same way (``test_sets`` in the results) and
``sacrebleu_mean``, the mean of their SacreBLEU scores, beside the main test set's;
``generate.test_sets_lenpen`` is the length penalty for the sets other than the main one
(the B2T authors decode newstest2014 with 0.6 and the other years with 1.0).
A headline recipe (``generate.score: rouge``, ``configs/gigaword``) is scored by F1
ROUGE-1/2/L instead of BLEU (``rouge.py``: rouge-score's, and ROUGE-1.5.5.pl's where Perl can
run it, each with its signature) on the tokenised hypotheses against ``SPLIT.tok.tgt``, under
``rouge`` in the results. Results are written as JSON beside the run.

Which checkpoints are scored is the recipe's protocol (``generate:``), as each paper's authors
evaluated:

* ``average_last: N`` (default 1): the mean of the last N epoch checkpoints;
  ``checkpoint_upper_bound: E`` makes them the last N up to epoch E (fairseq's
  ``average_checkpoints.py --num-epoch-checkpoints N --checkpoint-upper-bound E``, as
  Transformer-Clinic's ``eval_iwslt_de-en.sh`` / ``eval_wmt_en-de.sh``), and then all N must exist;
* ``window_search: {size: N, last: [A, B], select_on: SUBSET}``: every window of N epoch
  checkpoints ending at epoch A..B is averaged and scored on SUBSET, and the best one (by the
  recipe's ``bleu`` metric; the earliest on a tie) is the result (the T-Fixup authors'
  ``InferenceIWSLT.py``). With ``select_on: test`` the window is chosen on the test set itself,
  an optimistic number: the results say so (``selection``) and list every window's score;
* ``checkpoint: best``: ``checkpoint_best.pt`` alone, the checkpoint of the lowest validation
  loss (fairseq's ``--best-checkpoint-metric``; early stopping with ``--patience``);
* ``per_epoch: {first: A, last: B}``: each single epoch checkpoint A..B scored, no averaging
  (the Pre-LN paper's per-epoch BLEU curves, its Fig. 4); the results hold the curve and the
  last epoch's scores as the headline.
"""

import json
import re
from pathlib import Path

import sacrebleu
import torch
from sacremoses import MosesDetokenizer

from fairseq_layernorm_plugins.atomic import write_json
from fairseq_layernorm_plugins.prepare.moses import Tokenize
from fairseq_layernorm_plugins.prepare.textio import read_lines, write_lines
from fairseq_layernorm_plugins.runs.checkpoints import (
    BEST_PROTOCOL,
    average_checkpoints,
    best_checkpoint,
    existing,
    last_checkpoints,
    numbered_checkpoints,
    window_checkpoints,
)
from fairseq_layernorm_plugins.runs.launch import BIN, PLUGIN_DIR, run_logged, run_save_dir
from fairseq_layernorm_plugins.runs.perplexity import evaluate_lm
from fairseq_layernorm_plugins.runs.rouge import describe, rouge_metrics
from fairseq_layernorm_plugins.runs.wer import evaluate_asr

_COMPOUND = re.compile(r"(\S)-(\S)")


def read_hypotheses(generate_log):
    """fairseq-generate's ``H-`` lines in sentence order (text after BPE removal)."""
    hyps = {}
    for line in Path(generate_log).read_text(encoding="utf-8").splitlines():
        if line.startswith("H-"):
            idx, _, text = line.split("\t")
            hyps[int(idx[2:])] = text
    if sorted(hyps) != list(range(len(hyps))):
        raise ValueError(f"{generate_log}: hypotheses are not 0..{len(hyps) - 1}")
    return [hyps[i] for i in range(len(hyps))]


def compound_split(line):
    """fairseq's compound_split_bleu.sh: ``perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'``."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def score(hyps_tok, hyps_detok, refs_tok=None, refs_raw=None, lowercase=False):
    """{metric: {"score", "label", ...}} for what the references allow."""
    scores = {}
    if refs_raw is not None:
        bleu = sacrebleu.metrics.BLEU(lowercase=lowercase)
        result = bleu.corpus_score(hyps_detok, [refs_raw])
        scores["sacrebleu"] = {
            "score": round(result.score, 2),
            "signature": str(bleu.get_signature()),
            "detail": str(result),
            "label": "SacreBLEU, detokenised" + (", lowercased" if lowercase else ""),
        }
    if refs_tok is not None:  # tokenised on purpose: force=True keeps sacrebleu's "forgot to detokenize" warnings quiet
        result = sacrebleu.corpus_bleu(hyps_tok, [refs_tok], tokenize="none", force=True)
        scores["tokenized"] = {
            "score": round(result.score, 2),
            "detail": str(result),
            "label": "tokenized BLEU (Moses-tokenised text)",
        }
        result = sacrebleu.corpus_bleu(
            [compound_split(h) for h in hyps_tok], [[compound_split(r) for r in refs_tok]], tokenize="none", force=True
        )
        scores["compound_split"] = {
            "score": round(result.score, 2),
            "detail": str(result),
            "label": "tokenized BLEU, compound-split (compound_split_bleu.sh)",
        }
    return scores


def mean_sacrebleu(per_set):
    """The mean of each test set's detokenised SacreBLEU (the B2T paper's "Average" column)."""
    scores = {name: metrics["sacrebleu"]["score"] for name, metrics in per_set.items()}  # per_set: {name: score()}
    return {
        "score": round(sum(scores.values()) / len(scores), 2),
        "sets": scores,
        "label": f"SacreBLEU, detokenised, mean of {len(scores)} test sets ({', '.join(scores)})",
    }


def evaluate(
    run_dir,
    average_last=None,
    kind="epoch",
    subset=None,
    max_tokens=None,
    cpu=None,
    echo=print,
    upper_bound=None,
    out_dir=None,
):
    """Evaluate the run in ``run_dir`` (its run.json) by its recipe's protocol (module
    docstring; ``average_last`` / ``upper_bound`` override the recipe's); returns and writes
    results.json, beside the run or in ``out_dir`` (with the hypotheses, the generate logs and
    an averaged checkpoint), so that a second protocol leaves the first one's files alone.
    ``subset``: the split to score (default test); a speech run's comma-separated sets (default:
    the recipe's ``generate.subsets``). ``max_tokens`` per decoding batch: default 8000 tokens,
    50000 frames for speech."""
    run_dir = Path(run_dir)
    if not (run_dir / "run.json").is_file():
        raise ValueError("no run.json here (not a run directory: fairseq-ln-train writes them)")
    run = json.loads((run_dir / "run.json").read_text())
    if run.get("task") == "language_modeling":  # perplexity, not translation
        if out_dir is not None:
            raise ValueError(f"{run_dir}: a language model's results are written beside it, not to {out_dir}")
        return evaluate_lm(run_dir, run, average_last, cpu, echo)
    if run.get("task") == "speech_to_text":  # WER on LibriSpeech's four sets
        if out_dir is not None:
            raise ValueError(f"{run_dir}: a speech model's results are written beside it, not to {out_dir}")
        subsets = subset.split(",") if subset else None
        return evaluate_asr(run_dir, run, average_last, max_tokens or 50000, cpu, echo, subsets)  # frames
    subset, max_tokens = subset or "test", max_tokens or 8000
    save_dir = run_save_dir(run_dir, run)  # this folder's checkpoints, wherever the run was trained
    out_dir = Path(out_dir or run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    gen = run.get("generate", {})
    data_bin = Path(run["data"])
    root = data_bin.parent if data_bin.name == "bin" else data_bin
    stamp = json.loads((root / "stamp.json").read_text()) if (root / "stamp.json").is_file() else {}
    test_sets = gen.get("test_sets") if subset == "test" else None
    if test_sets:
        prepared = stamp.get("test_sets", {})
        missing = [name for name in test_sets if name not in prepared]
        if missing:
            raise ValueError(
                f"{root}: prepared without {', '.join(missing)} (the recipe scores {', '.join(test_sets)}); "
                "prepare it again with fairseq-ln-prepare wmt14 (--as b2t for the B2T recipes), which adds "
                "newstest2010-2016 by default"
            )
    lenpen = gen.get("lenpen", 1.0)
    rouge = gen.get("score") == "rouge"
    headline = "rouge" if rouge else gen.get("bleu", "sacrebleu")
    if rouge and (test_sets or ((gen.get("per_epoch") or gen.get("window_search")) and average_last is None)):
        raise ValueError(f"{run['recipe']}: a ROUGE recipe scores averaged or best checkpoints on one test set")

    def translate_and_score(checkpoint, split, lenpen):
        spm = bool(stamp.get("sentencepiece"))
        return score_subset(run, out_dir, data_bin, root, checkpoint, split, lenpen, spm, max_tokens, cpu)

    def averaged(paths):
        if len(paths) == 1:
            return paths[0]
        echo(f"averaged {len(paths)} checkpoints: {', '.join(p.name for p in paths)}")
        return average_checkpoints(paths, out_dir / f"checkpoint_avg{len(paths)}.pt")

    def main_metric(scores):
        return scores[headline]["score"] if headline in scores else next(iter(scores.values()))["score"]

    protocol = {}
    if gen.get("per_epoch") and average_last is None:
        first, last = gen["per_epoch"]["first"], gen["per_epoch"]["last"]
        epochs = numbered_checkpoints(save_dir)
        curve = []
        for epoch in range(first, last + 1):
            if epoch not in epochs:
                raise ValueError(f"{save_dir}: no checkpoint{epoch}.pt for the per-epoch curve {first}-{last}")
            epoch_scores, sentences = translate_and_score(epochs[epoch], subset, lenpen)
            curve.append({"epoch": epoch, "bleu": epoch_scores})
            echo(f"{run['recipe']} epoch {epoch}: {headline} {main_metric(epoch_scores):.2f}")
        checkpoints, scores = [epochs[last]], curve[-1]["bleu"]
        checkpoint = checkpoints[0]
        protocol = {"protocol": f"single epoch checkpoints {first}-{last}, no averaging", "curve": curve}
    elif gen.get("window_search") and average_last is None:
        search = gen["window_search"]
        size, (first, last), select_on = search["size"], search["last"], search.get("select_on", "valid")
        windows, best = [], None
        for end in range(first, last + 1):
            paths = window_checkpoints(save_dir, size, end)
            window_scores, _ = translate_and_score(averaged(paths), select_on, lenpen)
            windows.append({"epochs": [end - size + 1, end], "bleu": window_scores})
            if best is None or main_metric(window_scores) > main_metric(best[1]):  # strict: the earliest best
                best = (paths, window_scores, end)
            echo(f"{run['recipe']} epochs {end - size + 1}-{end} on {select_on}: {main_metric(window_scores):.2f}")
        checkpoints = best[0]
        protocol = {
            "protocol": f"best average of {size} consecutive epoch checkpoints ending at epoch {first}-{last}",
            "selection": f"chosen on the {select_on} set"
            + (
                " itself (the authors' protocol): an optimistic number, not a held-out one"
                if select_on == subset
                else ""
            ),
            "windows": windows,
            "chosen_epochs": [best[2] - size + 1, best[2]],
        }
        checkpoint = averaged(checkpoints)  # scored again, so the hypotheses beside the run are the chosen window's
        scores, sentences = translate_and_score(checkpoint, subset, lenpen)
    elif gen.get("checkpoint") == "best" and average_last is None:
        checkpoint = best_checkpoint(save_dir)
        checkpoints = [checkpoint]
        scores, sentences = translate_and_score(checkpoint, subset, lenpen)
        protocol = {"protocol": BEST_PROTOCOL}
    else:
        n = average_last or gen.get("average_last", 1)
        bound = upper_bound if upper_bound is not None else gen.get("checkpoint_upper_bound")
        checkpoints = existing(last_checkpoints(save_dir, n, kind, bound))
        checkpoint = averaged(checkpoints)
        scores, sentences = translate_and_score(checkpoint, subset, lenpen)
        if bound is not None:
            protocol = {"protocol": f"average of the last {n} {kind} checkpoints up to {kind} {bound}"}
    result = {
        "recipe": run["recipe"],
        "depth": run.get("depth"),
        "run_dir": str(run_dir),
        "subset": subset,
        "sentences": sentences,
        "checkpoints": [str(p) for p in checkpoints],
        **protocol,
        "beam": gen.get("beam", 5),
        "lenpen": lenpen,
        "rouge" if rouge else "bleu": scores,
        "paper": run.get("paper"),
    }
    if test_sets:
        per_set = {}
        for name in test_sets:
            split = stamp["test_sets"][name]
            if split == subset:
                per_set[name] = {**scores, "lenpen": lenpen}
            else:
                other = gen.get("test_sets_lenpen", lenpen)
                per_set[name] = {**translate_and_score(checkpoint, split, other)[0], "lenpen": other}
            echo(
                f"{run['recipe']} {run.get('depth')}: {name} ({split}): SacreBLEU {per_set[name]['sacrebleu']['score']:.2f}"
            )
        result["test_sets"] = per_set
        scores["sacrebleu_mean"] = mean_sacrebleu(per_set)
    result["headline"] = headline if headline in scores else next(iter(scores), None)
    write_json(out_dir / "results.json", result)
    for value in scores.values():
        shown = describe(value) if rouge else f"{value['score']:.2f}"
        echo(
            f"{run['recipe']} {run.get('depth')}: {value['label']}: {shown}"
            + (f"  [{value['signature']}]" if "signature" in value else "")
        )
    return result


def score_subset(run, out_dir, data_bin, root, checkpoint, subset, lenpen, spm, max_tokens, cpu=None):
    """Translate ``subset`` of ``data_bin`` with ``checkpoint``, the recipe's beam and
    ``lenpen``; write the hypotheses and the generate log to ``out_dir``; return (:func:`score`'s metrics, the
    number of sentences)."""
    gen = run.get("generate", {})
    cpu = (not torch.cuda.is_available()) if cpu is None else cpu
    cmd = [
        BIN / "fairseq-generate",
        data_bin,
        "--user-dir",
        PLUGIN_DIR,
        "--path",
        checkpoint,
        "--gen-subset",
        subset,
        "--beam",
        gen.get("beam", 5),
        "--lenpen",
        lenpen,
        "--max-tokens",
        max_tokens,
        "--remove-bpe",
        "sentencepiece" if spm else "subword_nmt",
        *(["--cpu"] if cpu else []),
        *gen.get("extra", []),
    ]
    log = out_dir / f"generate-{subset}.log"
    log.unlink(missing_ok=True)
    run_logged(cmd, log, f"{run['recipe']} generate {subset}", echo=lambda line: "Generate " in line)

    tgt = run["target_lang"]
    hyps = read_hypotheses(log)
    refs = {
        kind_: read_lines(root / f"{subset}.{kind_}.{tgt}") if (root / f"{subset}.{kind_}.{tgt}").is_file() else None
        for kind_ in ("tok", "raw")
    }
    for kind_, lines in refs.items():
        if lines is not None and len(lines) != len(hyps):
            raise ValueError(f"{root / f'{subset}.{kind_}.{tgt}'}: {len(lines)} references for {len(hyps)} hypotheses")
    if gen.get("score") == "rouge":  # headlines: the tokenised text as the release writes it
        if refs["tok"] is None:
            raise ValueError(f"{root / f'{subset}.tok.{tgt}'}: no reference headlines (fairseq-ln-prepare gigaword writes them)")
        write_lines(out_dir / f"{subset}.hyp.tok.{tgt}", hyps)
        return rouge_metrics(hyps, refs["tok"]), len(hyps)
    if spm:
        hyps_detok, hyps_tok = hyps, [Tokenize(tgt, aggressive_dash_splits=True)(h) for h in hyps]
    else:
        detok = MosesDetokenizer(lang=tgt)
        hyps_tok, hyps_detok = hyps, [detok.detokenize(h.split()) for h in hyps]
    write_lines(out_dir / f"{subset}.hyp.tok.{tgt}", hyps_tok)
    write_lines(out_dir / f"{subset}.hyp.detok.{tgt}", hyps_detok)
    return score(hyps_tok, hyps_detok, refs["tok"], refs["raw"], lowercase=gen.get("lowercase", False)), len(hyps)
