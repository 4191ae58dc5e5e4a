#!/usr/bin/env python
"""Prepare LibriSpeech speech recognition (the same as ``fairseq-ln-prepare librispeech``; see
fairseq_layernorm_plugins/prepare/librispeech.py or --help)."""

from fairseq_layernorm_plugins.prepare.librispeech import main

if __name__ == "__main__":
    main()
