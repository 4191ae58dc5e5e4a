"""A learnable toy translation task for tests and quick CPU experiments."""

import random
from pathlib import Path

from fairseq_layernorm_plugins.prepare.textio import write_lines


def write_reversal_task(directory, seed=0, sizes=(("train", 1200), ("valid", 80), ("test", 40)), vocab_size=24):
    """Write ``{split}.src`` / ``{split}.tgt``: the target is the source reversed through a
    word map (w7 -> v7), 3-10 words a sentence."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(vocab_size)]
    for split, n in sizes:
        src, tgt = [], []
        for _ in range(n):
            words = [rng.choice(vocab) for _ in range(rng.randint(3, 10))]
            src.append(" ".join(words))
            tgt.append(" ".join("v" + w[1:] for w in reversed(words)))
        write_lines(Path(directory) / f"{split}.src", src)
        write_lines(Path(directory) / f"{split}.tgt", tgt)
