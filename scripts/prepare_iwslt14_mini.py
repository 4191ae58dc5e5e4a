#!/usr/bin/env python
"""Build IWSLT14-mini (see fairseq_layernorm_plugins/prepare/iwslt14_mini.py)."""

from fairseq_layernorm_plugins.prepare.iwslt14_mini import main

if __name__ == "__main__":
    main()
