"""Joint subword segmentation: BPE with subword-nmt (the recipes' choice) or a
SentencePiece model (an option for WMT)."""

import logging
from pathlib import Path

from subword_nmt.apply_bpe import BPE
from subword_nmt.learn_bpe import learn_bpe

logger = logging.getLogger(__name__)


def learn_joint_bpe(texts, codes_path, merges):
    """``learn_bpe.py -s MERGES < cat(texts) > codes``; ``texts`` are lists of lines
    (the source side first, then the target side, as the recipes concatenate them),
    streamed to subword-nmt without joining them into one string."""
    logger.info("learning %d BPE merges on %d lines", merges, sum(map(len, texts)))
    with open(codes_path, "w", encoding="utf-8") as codes:
        learn_bpe((line + "\n" for lines in texts for line in lines), codes, merges)


class ApplyBPE:
    """``apply_bpe.py -c CODES`` on one line."""

    def __init__(self, codes_path):
        with open(codes_path, encoding="utf-8") as codes:
            self.bpe = BPE(codes)

    def __call__(self, line):
        return self.bpe.process_line(line)


def remove_bpe(line):
    """Undo subword-nmt's ``@@ `` segmentation (fairseq's ``--remove-bpe``)."""
    return (line + " ").replace("@@ ", "").rstrip()


def learn_sentencepiece(texts, model_prefix, vocab_size):
    """A joint SentencePiece unigram model of ``vocab_size`` pieces on the given lines."""
    import sentencepiece as spm

    path = Path(f"{model_prefix}.train.txt")
    path.write_text("".join(line + "\n" for lines in texts for line in lines), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(path),
        model_prefix=str(model_prefix),
        vocab_size=vocab_size,
        character_coverage=1.0,
        input_sentence_size=10_000_000,
        shuffle_input_sentence=True,
        minloglevel=2,
    )
    path.unlink()


class ApplySentencePiece:
    """Encode one line into space-separated pieces (``spm_encode --output_format=piece``).
    The model loads lazily so the object pickles into worker processes."""

    def __init__(self, model_path):
        self.model_path = str(model_path)
        self.sp = None

    def __getstate__(self):
        return {"model_path": self.model_path, "sp": None}

    def __call__(self, line):
        if self.sp is None:
            import sentencepiece as spm

            self.sp = spm.SentencePieceProcessor(model_file=self.model_path)
        return " ".join(self.sp.encode(line, out_type=str))
