#!/usr/bin/env python
"""Throughput of the preparation's text steps on this machine: Moses tokenisation
(+ lowercasing, as IWSLT14) and BPE application with fairseq's IWSLT14 codes, on the
raw IWSLT14 test set (6750 pairs, each line once), in sentence pairs per second, with 1
and with all worker processes.

    python benchmarks/prepare_throughput.py [--shared-data ../shared/data]
"""

import argparse
import os
import time
from pathlib import Path

from fairseq_layernorm_plugins.prepare.iwslt14 import TEST_SETS
from fairseq_layernorm_plugins.prepare.moses import Tokenize, lowercase, straight_apostrophe, xml_segments
from fairseq_layernorm_plugins.prepare.parallel import Compose, map_lines
from fairseq_layernorm_plugins.prepare.subwords import ApplyBPE
from fairseq_layernorm_plugins.prepare.textio import read_lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared-data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    args = parser.parse_args()
    iwslt = Path(args.shared_data) / "iwslt14"
    text = {
        lang: [
            s for name in TEST_SETS for s in xml_segments(read_lines(iwslt / "orig_de-en" / f"{name}.de-en.{lang}.xml"))
        ]
        for lang in ("de", "en")
    }
    pairs = len(text["de"])
    codes = iwslt / "fairseq_iwslt14.tokenized.de-en" / "code"
    for workers in sorted({1, os.cpu_count()}):
        timings = {}
        for lang, lines in text.items():
            start = time.perf_counter()
            tokens = map_lines(Compose(straight_apostrophe, Tokenize(lang), lowercase), lines, workers)
            timings["tokenise", lang] = time.perf_counter() - start
            start = time.perf_counter()
            map_lines(ApplyBPE(codes), tokens, workers)  # a fresh BPE cache each time
            timings["bpe", lang] = time.perf_counter() - start
        tok = sum(t for (step, _), t in timings.items() if step == "tokenise")
        total = sum(timings.values())
        print(
            f"workers {workers}: tokenise {pairs / tok:,.0f} pairs/s, BPE {pairs / (total - tok):,.0f} pairs/s, "
            f"tokenise + BPE {pairs / total:,.0f} pairs/s ({pairs} pairs, {total:.1f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
