#!/usr/bin/env python
"""The same as ``fairseq-ln-prepare librispeech_espeak``: see fairseq_layernorm_plugins/prepare/librispeech_espeak.py (or --help)."""

from fairseq_layernorm_plugins.prepare.librispeech_espeak import main

if __name__ == "__main__":
    main()
