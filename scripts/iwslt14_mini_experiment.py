#!/usr/bin/env python
"""The README's main job: a small real experiment on CPU, end to end.

1. builds IWSLT14-mini from ../shared/data/iwslt14 (or --iwslt-dir);
2. trains each method briefly with ``fairseq-train --user-dir fairseq_layernorm_plugins``:
   Post-LN (fairseq's ``transformer``) with warm-up, the Pre-LN paper's baseline, and
   Pre-LN without warm-up (Xiong et al. 2020, Sec. 4.1), scaled down to a CPU budget;
3. translates the test set with ``fairseq-generate`` and scores tokenised BLEU
   (sacrebleu, tokenize=none on the Moses-tokenised lowercased text: the IWSLT14
   convention), printing the methods side by side and writing results.json.

Prints every command it runs; full logs go to ``<out>/<method>/*.log``.
"""
import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import sacrebleu

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# a CPU-sized Transformer (the IWSLT14 recipes use d=512, 6L-6L)
SMALL = (
    "--encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 128 --decoder-embed-dim 128 "
    "--encoder-ffn-embed-dim 256 --decoder-ffn-embed-dim 256 "
    "--encoder-attention-heads 4 --decoder-attention-heads 4 --share-decoder-input-output-embed"
).split()

METHODS = {
    # Xiong et al. 2020: Post-LN needs warm-up (4000 updates in the paper, scaled here)
    "postln": ("transformer_iwslt_de_en", "--lr-scheduler inverse_sqrt --warmup-init-lr 1e-7 --warmup-updates {warmup}"),
    # Pre-LN: no warm-up, constant lr, x0.1 at epoch 8 (the paper's IWSLT14 schedule)
    "preln": ("transformer_preln_iwslt_de_en", "--lr-scheduler epoch_decay_nowarmup --decay-epoch 8 --decay-factor 0.1"),
}


def run(cmd, log_path, label, show=lambda line: False):
    """Run a command, writing its output to ``log_path`` and echoing progress lines."""
    print(f"[{label}] $ {shlex.join(map(str, cmd))}", flush=True)
    with open(log_path, "w") as log, subprocess.Popen(
        list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        for line in proc.stdout:
            log.write(line)
            if show(line):
                print(f"[{label}] {line.rstrip()}", flush=True)
    if proc.returncode:
        sys.exit(f"[{label}] failed (exit {proc.returncode}); see {log_path}")


def progress(line):
    return ("| train_inner |" in line) or ("| valid |" in line)


def bleu_from_generate(generate_log, references):
    """Tokenised BLEU of fairseq-generate's ``H-`` lines (BPE removed) against ``references``."""
    hyps = {}
    for line in Path(generate_log).read_text().splitlines():
        if line.startswith("H-"):
            idx, _, text = line.split("\t")
            hyps[int(idx[2:])] = text
    if len(hyps) != len(references):
        sys.exit(f"{generate_log}: {len(hyps)} hypotheses for {len(references)} references")
    bleu = sacrebleu.corpus_bleu([hyps[i] for i in range(len(references))], [references], tokenize="none")
    return bleu


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iwslt-dir", default=str(REPO.parent / "shared" / "data" / "iwslt14"),
                        help="the shared IWSLT14 folder (default: ../shared/data/iwslt14)")
    parser.add_argument("--data", default=str(REPO / "data" / "iwslt14-mini"), help="where IWSLT14-mini is built")
    parser.add_argument("--out", default=str(REPO / "runs" / "iwslt14-mini"), help="checkpoints, logs, results")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, from {sorted(METHODS)}")
    parser.add_argument("--max-update", type=int, default=300, help="updates per method (default 300)")
    parser.add_argument("--warmup", type=int, default=100, help="Post-LN warm-up updates (default 100)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--test-lines", type=int, default=1000, help="evenly spaced test lines (0 = all 6750)")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    methods = args.methods.split(",")
    unknown = set(methods) - set(METHODS)
    if unknown:
        parser.error(f"unknown method(s) {sorted(unknown)}; choose from {sorted(METHODS)}")

    from fairseq_layernorm_plugins.prepare.iwslt14_mini import prepare
    from fairseq_layernorm_plugins.prepare.textio import DataError, read_lines

    start = time.time()
    try:
        sizes = prepare(args.iwslt_dir, args.data, test_lines=args.test_lines or None)["sizes"]
    except DataError as err:
        sys.exit(f"error: {err}")
    print(f"IWSLT14-mini ({args.data}): " + ", ".join(f"{k} {v}" for k, v in sizes.items()), flush=True)
    data_bin, references = Path(args.data) / "bin", read_lines(Path(args.data) / "test.tok.en")

    results = {}
    for method in methods:
        arch, schedule = METHODS[method]
        out = Path(args.out) / method
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        run([BIN / "fairseq-train", data_bin, "--user-dir", REPO / "fairseq_layernorm_plugins", "--arch", arch, *SMALL,
             "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", args.lr, "--clip-norm", "0",
             *schedule.format(warmup=args.warmup).split(), "--dropout", "0.1", "--weight-decay", "0.0001",
             "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
             "--max-tokens", args.max_tokens, "--max-update", args.max_update, "--seed", args.seed, "--cpu",
             "--save-dir", out / "checkpoints", "--no-epoch-checkpoints", "--log-format", "simple",
             "--log-interval", "25", "--no-progress-bar"],
            out / "train.log", method, show=progress)
        train_minutes = (time.time() - t0) / 60
        run([BIN / "fairseq-generate", data_bin, "--user-dir", REPO / "fairseq_layernorm_plugins",
             "--path", out / "checkpoints" / "checkpoint_last.pt", "--gen-subset", "test", "--beam", args.beam,
             "--max-tokens", "8000", "--remove-bpe", "--cpu"],
            out / "generate.log", method)
        bleu = bleu_from_generate(out / "generate.log", references)
        results[method] = {"arch": arch, "bleu": round(bleu.score, 2), "bleu_detail": str(bleu),
                           "updates": args.max_update, "train_minutes": round(train_minutes, 1)}
        print(f"[{method}] tokenised BLEU {bleu.score:.2f} after {args.max_update} updates ({train_minutes:.1f} min)", flush=True)

    Path(args.out, "results.json").write_text(json.dumps(results, indent=1))
    print(f"\nIWSLT14-mini De->En, {sizes['test']} test lines, tokenised BLEU (lowercased, Moses-tokenised):")
    print(f"{'method':8} {'arch':32} {'updates':>8} {'BLEU':>6}")
    for method, r in results.items():
        print(f"{method:8} {r['arch']:32} {r['updates']:>8} {r['bleu']:>6.2f}")
    print(f"(total {(time.time() - start) / 60:.1f} min; results in {Path(args.out, 'results.json')})")


if __name__ == "__main__":
    main()
