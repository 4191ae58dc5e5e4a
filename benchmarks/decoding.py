#!/usr/bin/env python
"""Beam-search decoding speed with ``--fused-attention`` against fairseq's own attention path,
on a trained checkpoint, in one process:

    python benchmarks/decoding.py [--path CHECKPOINT] [--data DATA_BIN] [--beam 5] [--reps 5] \\
        [--max-len-a 0 --max-len-b 200]

Loads the checkpoint twice, as ``fairseq-generate`` does (``prepare_for_inference_``, the task's
generator), once as trained and once with ``--model-overrides "{'fused_attention': True}"``;
each repetition translates the whole ``--gen-subset`` with both, in alternating order, and
the ratio of sentences per second is taken per repetition (median and spread printed, with
the 1.2x target). Also checks that both give the same translations. Default checkpoint: the
main job's Pre-LN model (``bash scripts/main_job.sh``). ``--json PATH`` also writes the
numbers to PATH (what ``scripts/gpu/check.py`` reads).
"""

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PATH = REPO / "runs/main-job/multi30k/preln/2L-2L.seed1/checkpoints/checkpoint_last.pt"
TARGET = 1.2


def load(path, data, beam, fused, device, precision="fp32", max_len=()):
    """(task, model, generator) as fairseq-generate builds them (``--fp16`` / ``--bf16``: the
    model in half precision), optionally with the fused attention; ``data``: the data-bin to
    read in place of the one the checkpoint names (None: that one); ``max_len``: fairseq-generate
    flags bounding the output length (``--max-len-a A --max-len-b B``; none: fairseq's default)."""
    from fairseq import checkpoint_utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.options import get_generation_parser, parse_args_and_arch

    # only the generation settings are read from argv: the task is the checkpoint's, with ``overrides``
    argv = [
        str(data or "."),
        "--user-dir",
        str(REPO / "fairseq_layernorm_plugins"),
        "--path",
        str(path),
        "--beam",
        str(beam),
        *max_len,
    ]
    cfg = convert_namespace_to_omegaconf(parse_args_and_arch(get_generation_parser(), argv))
    overrides = {**({"data": str(data)} if data else {}), **({"fused_attention": True} if fused else {})}
    (model,), _, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides=overrides)
    model.prepare_for_inference_(cfg)
    model.to(device=device, dtype={"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)).eval()
    return task, model, task.build_generator([model], cfg.generation)


def translate(task, model, generator, batches):
    """(seconds, [token lists per sentence, best hypothesis]) for all ``batches``."""
    hypotheses = {}
    start = time.perf_counter()
    with torch.no_grad():
        for sample in batches:
            for sid, hyps in zip(sample["id"].tolist(), task.inference_step(generator, [model], sample)):
                hypotheses[sid] = hyps[0]["tokens"].tolist()
    return time.perf_counter() - start, [hypotheses[i] for i in sorted(hypotheses)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", default=str(DEFAULT_PATH), help=f"checkpoint (default: {DEFAULT_PATH})")
    parser.add_argument(
        "--data", help="its data-bin (default: the one it was trained on; give it where the checkpoint was moved)"
    )
    parser.add_argument("--gen-subset", default="test")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128, help="sentences per batch (default 128)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--max-len-a", type=float, help="output length limit a * source length + b, as fairseq-generate's (default 0)"
    )
    parser.add_argument("--max-len-b", type=int, help="(default 200, fairseq-generate's)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32")
    parser.add_argument("--json", metavar="PATH", help="also write the measured numbers to PATH (JSON)")
    args = parser.parse_args(argv)
    if not Path(args.path).is_file():
        parser.exit(2, f"error: {args.path}: no such checkpoint (train one, e.g. bash scripts/main_job.sh)\n")
    torch.set_num_threads(args.threads)
    max_len = [f"--max-len-{k}={v}" for k, v in (("a", args.max_len_a), ("b", args.max_len_b)) if v is not None]
    variants = {
        name: load(args.path, args.data, args.beam, name == "fused", args.device, args.precision, max_len)
        for name in ("stock", "fused")
    }
    task = variants["stock"][0]
    task.load_dataset(args.gen_subset)
    dataset = task.dataset(args.gen_subset)
    # fairseq-generate's batches: sorted by length, --batch-size sentences each
    iterator = task.get_batch_iterator(dataset=dataset, max_sentences=args.batch_size, seed=1)
    batches = list(iterator.next_epoch_itr(shuffle=False))
    if args.device == "cuda":
        from fairseq import utils

        batches = [utils.move_to_cuda(b) for b in batches]
    seconds, outputs = {name: [] for name in variants}, {}
    for rep in range(args.reps + 1):  # the first, untimed, warms up
        for name in list(variants)[:: 1 if rep % 2 else -1]:
            took, outputs[name] = translate(*variants[name], batches)
            if rep:
                seconds[name].append(took)
        if rep:
            print(
                f"rep {rep}/{args.reps}: "
                + ", ".join(f"{n} {len(dataset) / s[-1]:.1f} sentences/s" for n, s in seconds.items()),
                flush=True,
            )
    ratios = [s / f for s, f in zip(seconds["stock"], seconds["fused"])]
    median = statistics.median(ratios)
    result = {
        **{key: getattr(args, key) for key in ("device", "precision", "threads", "beam", "batch_size", "reps")},
        "sentences": len(dataset),
        "stock_sentences_per_s": len(dataset) / statistics.median(seconds["stock"]),
        "sentences_per_s": {name: [len(dataset) / t for t in s] for name, s in seconds.items()},  # per repetition
        "ratios": ratios,  # fairseq's attention's seconds over --fused-attention's, per repetition
        "speed_ratio": median,
        "spread": [min(ratios), max(ratios)],
        "target": TARGET,
        "met": median >= TARGET,
        "same": sum(a == b for a, b in zip(outputs["stock"], outputs["fused"])),  # sentences translated alike
        # output length sets the decoding time: an undertrained model may write to the length limit
        "tokens_per_sentence": statistics.mean(len(tokens) for tokens in outputs["stock"]),
    }
    print(
        f"\n{args.device} {args.precision}, {args.threads} threads, beam {args.beam}, {len(dataset)} sentences in batches of "
        f"{args.batch_size}, {args.reps} reps; fairseq's attention {result['stock_sentences_per_s']:.1f} "
        f"sentences/s, {result['tokens_per_sentence']:.1f} tokens each (with </s>)\n"
        f"--fused-attention speed ratio {median:.3f} (spread {min(ratios):.3f}-{max(ratios):.3f}); "
        f"target >= {TARGET}: {'met' if result['met'] else 'MISSED'}; same translation for {result['same']}/{len(dataset)} sentences"
    )
    if args.json:
        from fairseq_layernorm_plugins.atomic import write_json

        write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
