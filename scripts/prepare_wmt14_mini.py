#!/usr/bin/env python
"""The same as ``fairseq-ln-prepare wmt14_mini``: see fairseq_layernorm_plugins/prepare/wmt14_mini.py (or --help)."""

from fairseq_layernorm_plugins.prepare.wmt14_mini import main

if __name__ == "__main__":
    main()
