#!/usr/bin/env python
"""The same as ``fairseq-ln-prepare gigaword_mini``: see fairseq_layernorm_plugins/prepare/gigaword_mini.py (or --help)."""

from fairseq_layernorm_plugins.prepare.gigaword_mini import main

if __name__ == "__main__":
    main()
