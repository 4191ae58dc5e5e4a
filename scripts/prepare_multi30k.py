#!/usr/bin/env python
"""The same as ``fairseq-ln-prepare multi30k``: see fairseq_layernorm_plugins/prepare/multi30k.py (or --help)."""

from fairseq_layernorm_plugins.prepare.multi30k import main

if __name__ == "__main__":
    main()
