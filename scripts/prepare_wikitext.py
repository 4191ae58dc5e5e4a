#!/usr/bin/env python
"""The same as ``fairseq-ln-prepare wikitext103`` / ``wikitext2``: ``python scripts/prepare_wikitext.py
CORPUS [options]``; see fairseq_layernorm_plugins/prepare/wikitext.py (or CORPUS --help)."""

from fairseq_layernorm_plugins.prepare.wikitext import script

if __name__ == "__main__":
    script()
