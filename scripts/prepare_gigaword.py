#!/usr/bin/env python
"""Prepare Gigaword headline generation (the same as ``fairseq-ln-prepare gigaword``; see
fairseq_layernorm_plugins/prepare/gigaword.py or --help)."""

from fairseq_layernorm_plugins.prepare.gigaword import main

if __name__ == "__main__":
    main()
