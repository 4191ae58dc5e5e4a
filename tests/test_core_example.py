"""docs/examples/plain_pytorch_lm.py, the core's plain PyTorch example, from its command line:
a few updates of a tiny model on the start of the real WikiText-2 (../shared/data/wikitext2)
end in a finite validation perplexity below the vocabulary's size; its vocabulary and token
stream are fairseq-preprocess's."""

import math
import os
import re
import subprocess
import sys

import pytest
from conftest import REPO, shared_data

EXAMPLE = REPO / "docs" / "examples" / "plain_pytorch_lm.py"
TINY = "--layers 1 --embed-dim 16 --ffn-embed-dim 32 --attention-heads 2 --tokens-per-sample 64 --batch-size 8"


@pytest.fixture
def wikitext_start(tmp_path):
    """A folder with the first lines of WikiText-2's train and valid splits: seconds, not minutes."""
    shared = shared_data("wikitext2")
    for split, lines in (("train", 3000), ("valid", 300)):
        with open(shared / f"wiki.{split}.tokens", encoding="utf-8") as f:
            text = "".join(line for _, line in zip(range(lines), f))
        (tmp_path / f"wiki.{split}.tokens").write_text(text, encoding="utf-8")
    return tmp_path


def test_the_example_trains_and_validates(wikitext_start, tmp_path):
    cmd = [sys.executable, str(EXAMPLE), "--method", "preln", "--data", str(wikitext_start), *TINY.split()]
    cmd += ["--updates", "16", "--warmup-updates", "2", "--lr", "0.01", "--log-interval", "8"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    vocab = int(re.search(r"vocabulary (\d+)", proc.stdout).group(1))
    assert vocab % 8 == 0 and vocab > 1000, proc.stdout  # fairseq's dictionary, padded to a multiple of 8
    ppl = float(re.search(r"update 16 \|.*\| valid ppl ([0-9.e+naif]+)", proc.stdout).group(1))
    assert math.isfinite(ppl) and 1 < ppl < vocab, proc.stdout
    assert [int(u) for u in re.findall(r"^update (\d+)", proc.stdout, re.M)] == [8, 16]


def test_the_vocabulary_and_stream_are_fairseqs(wikitext_start):
    """fairseq-preprocess --only-source's dictionary (counted over train, padded to a multiple of
    8) and its token ids, a line's words then </s>."""
    import importlib.util

    from fairseq.tasks.language_modeling import LanguageModelingTask

    spec = importlib.util.spec_from_file_location("plain_pytorch_lm", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    train, valid = wikitext_start / "wiki.train.tokens", wikitext_start / "wiki.valid.tokens"
    theirs = LanguageModelingTask.build_dictionary([str(train)], workers=1, threshold=0, nwords=-1, padding_factor=8)
    ours = example.build_vocab(train)
    assert sorted(ours, key=ours.get) == theirs.symbols
    with open(valid, encoding="utf-8") as f:
        stream = [i for line in f for i in theirs.encode_line(line, add_if_not_exist=False).tolist()]
    assert example.encode(valid, ours).tolist() == stream
