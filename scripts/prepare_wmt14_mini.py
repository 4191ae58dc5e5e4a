#!/usr/bin/env python
"""See fairseq_layernorm_plugins/prepare/wmt14_mini.py (or --help)."""

from fairseq_layernorm_plugins.prepare.wmt14_mini import main

if __name__ == "__main__":
    main()
