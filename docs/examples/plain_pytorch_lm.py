"""A decoder-only language model of any method of ``layernorm_methods`` (torch alone, no
fairseq) in a plain PyTorch training loop on WikiText-2 (word level), as fairseq's
``language_modeling`` task with ``--sample-break-mode none`` trains and validates it:

* the vocabulary of the training split, as ``fairseq-preprocess --only-source`` makes it
  (``<s> <pad> </s> <unk>`` first, then words by count, padded to a multiple of 8), every line
  its whitespace-separated words plus an end-of-sentence token;
* each split one stream cut into contiguous blocks of ``--tokens-per-sample`` targets, each
  block's input the same tokens shifted right by one (the stream's first input is ``</s>``);
* Adam, a linear warm-up from 0 then inverse-sqrt decay (fairseq's ``inverse_sqrt``), gradient
  clipping, a fresh random order of the full training blocks every epoch (the one short block
  at the end is left out);
* the training loss (nats) and perplexity printed every ``--log-interval`` updates;
* validation perplexity per token over every validation block, each block on its own.

    python docs/examples/plain_pytorch_lm.py --method b2t --updates 200

``docs/examples/plain_pytorch_lm_fairseq.sh`` trains the same model through ``fairseq-train``;
the numbers of both are in ``docs/plain_pytorch.md``.
"""

import argparse
import math
import time
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F

import layernorm_methods

REPO = Path(__file__).resolve().parents[2]
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # fairseq's Dictionary: padding 1, end of sentence 2, unknown 3
PAD, EOS, UNK = 1, 2, 3


def lines(path):
    """Each line's whitespace-separated words plus the end-of-sentence token."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield line.split() + ["</s>"]


def build_vocab(path):
    """fairseq's dictionary of ``path``: the specials, then words by count (ties in alphabetical
    order), padded to a multiple of 8."""
    counts = Counter(word for words in lines(path) for word in words)
    words = sorted((w for w in counts if w not in SPECIALS), key=lambda w: (-counts[w], w))
    vocab = SPECIALS + words
    vocab += [f"madeupword{i:04d}" for i in range(-len(vocab) % 8)]
    return {word: i for i, word in enumerate(vocab)}


def encode(path, vocab):
    """The split as one stream of token ids, shape (N,)."""
    return torch.tensor([vocab.get(w, UNK) for words in lines(path) for w in words])


def blocks(stream, size):
    """(inputs, targets) blocks of ``size`` tokens, the last one shorter: the targets are the
    stream, the inputs the stream shifted right by one after a leading end of sentence."""
    inputs = torch.cat([torch.tensor([EOS]), stream[:-1]])
    return list(zip(inputs.split(size), stream.split(size)))


def batches(train, batch_size, seed):
    """Batches of ``batch_size`` full training blocks, in a new random order every epoch."""
    size = len(train[0][0])
    inputs = torch.stack([x for x, _ in train if len(x) == size])
    targets = torch.stack([y for _, y in train if len(y) == size])
    gen = torch.Generator().manual_seed(seed)
    while True:
        for idx in torch.randperm(len(inputs), generator=gen).split(batch_size):
            yield inputs[idx], targets[idx]


def inverse_sqrt(warmup):
    """fairseq's ``inverse_sqrt`` (warm-up from 0) as a factor of the peak lr after ``step`` updates."""
    return lambda step: step / warmup if step < warmup else math.sqrt(warmup / step)


@torch.no_grad()
def perplexity(model, data, batch_size):
    """exp(mean negative log-likelihood per token) over every block of ``data``."""
    model.eval()
    nll, count = 0.0, 0
    full = [b for b in data if len(b[0]) == len(data[0][0])]
    chunks = [full[i : i + batch_size] for i in range(0, len(full), batch_size)] + [[b] for b in data[len(full) :]]
    for chunk in chunks:
        x, y = torch.stack([b[0] for b in chunk]), torch.stack([b[1] for b in chunk])
        nll += F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten(), reduction="sum").item()
        count += y.numel()
    model.train()
    return math.exp(nll / count)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--method", default="b2t", help=f"one of: {', '.join(layernorm_methods.method_names())}")
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "wikitext2"), help="wiki.*.tokens")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--embed-dim", type=int, default=128)
    parser.add_argument("--ffn-embed-dim", type=int, default=512)
    parser.add_argument("--attention-heads", type=int, default=4)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--tokens-per-sample", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8, help="blocks per update")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup-updates", type=int, default=50)
    parser.add_argument("--clip-norm", type=float, default=1.0)
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--log-interval", type=int, default=25)
    parser.add_argument("--valid-interval", type=int, default=0, help="validate every N updates (0: at the end)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    data = Path(args.data)
    vocab = build_vocab(data / "wiki.train.tokens")
    train = blocks(encode(data / "wiki.train.tokens", vocab), args.tokens_per_sample)
    valid = blocks(encode(data / "wiki.valid.tokens", vocab), args.tokens_per_sample)
    print(f"vocabulary {len(vocab)}, train blocks {len(train)}, valid blocks {len(valid)}", flush=True)

    torch.manual_seed(args.seed)
    model = layernorm_methods.build_language_model(
        args.method,
        vocab=len(vocab),
        layers=args.layers,
        embed_dim=args.embed_dim,
        ffn_embed_dim=args.ffn_embed_dim,
        attention_heads=args.attention_heads,
        dropout=args.dropout,
        share_decoder_input_output_embed=True,  # tied, as fairseq-train's --share-decoder-input-output-embed
        padding_idx=PAD,
    )
    print(f"{args.method}: {sum(p.numel() for p in model.parameters()):,} parameters", flush=True)
    stream = batches(train, args.batch_size, args.seed)
    first = next(stream)
    if args.method == "admin":  # Admin's omegas come from one forward pass over the first batch
        from layernorm_methods.admin import profile_admin_

        profile_admin_(model, [(first[0],)])
        model.train()

    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-8)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, inverse_sqrt(args.warmup_updates))
    start, losses = time.time(), []
    for update in range(1, args.updates + 1):
        x, y = first if update == 1 else next(stream)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise SystemExit(f"update {update}: loss {losses[-1]}")
        validate = update == args.updates or (args.valid_interval and update % args.valid_interval == 0)
        if validate or update % args.log_interval == 0:
            mean = sum(losses) / len(losses)
            line = f"update {update} | loss {mean:.3f} | ppl {math.exp(mean):.1f} | lr {schedule.get_last_lr()[0]:.3g}"
            if validate:
                line += f" | valid ppl {perplexity(model, valid, args.batch_size):.2f}"
            print(f"{line} | {time.time() - start:.0f} s", flush=True)
            losses = []
    print(f"done: {args.method}, {args.updates} updates, {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
