#!/usr/bin/env python
"""The same as ``fairseq-ln-prepare wmt14``: see fairseq_layernorm_plugins/prepare/wmt14.py (or --help)."""

from fairseq_layernorm_plugins.prepare.wmt14 import main

if __name__ == "__main__":
    main()
