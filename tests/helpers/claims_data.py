"""The claim tests' Multi30k: prepared as ``claims.py`` prepares it, then validated on a few
of its validation sentences (each validation of a run greedily decodes the whole validation
set for ``--eval-bleu``, most of a toy run's time on 1,014 sentences)."""

import json
from pathlib import Path

from fairseq_layernorm_plugins.prepare.dataset import evenly_spaced


def keep_valid_lines(data_dir, n):
    """Cut the validation set of the prepared corpus in ``data_dir`` to ``n`` evenly spaced
    sentence pairs, the same ones in the data-bin (``bin/valid.*``, what fairseq-train
    validates on), the text files beside it and the stamp's size; the rest (its key, so the
    corpus stays up to date for ``prepare_corpus``, train and test) is left as prepared."""
    from fairseq.data import indexed_dataset

    data_dir = Path(data_dir)
    kept = None
    for index in sorted((data_dir / "bin").glob("valid.*.idx")):
        prefix = str(index.with_suffix(""))
        dataset = indexed_dataset.MMapIndexedDataset(prefix)
        kept = kept or evenly_spaced(range(len(dataset)), n)
        items, dtype = [dataset[i].clone() for i in kept], dataset._index.dtype
        del dataset  # its memory map, before the files are written again
        builder = indexed_dataset.MMapIndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
        for item in items:
            builder.add_item(item)
        builder.finalize(str(index))
    if kept is None:
        raise FileNotFoundError(f"{data_dir / 'bin'}: no validation set")
    for text in data_dir.glob("valid.*"):
        lines = text.read_text(encoding="utf-8").splitlines(keepends=True)
        text.write_text("".join(lines[i] for i in kept), encoding="utf-8")
    stamp = json.loads((data_dir / "stamp.json").read_text())
    stamp["sizes"]["valid"] = len(kept)
    (data_dir / "stamp.json").write_text(json.dumps(stamp, indent=1))
    return kept
