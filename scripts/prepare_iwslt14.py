#!/usr/bin/env python
"""The same as ``fairseq-ln-prepare iwslt14``: see fairseq_layernorm_plugins/prepare/iwslt14.py (or --help)."""

from fairseq_layernorm_plugins.prepare.iwslt14 import main

if __name__ == "__main__":
    main()
