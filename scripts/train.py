#!/usr/bin/env python
"""Train a recipe (the same as ``fairseq-ln-train``; see fairseq_layernorm_plugins/cli.py or --help)."""

from fairseq_layernorm_plugins.cli import train

if __name__ == "__main__":
    train()
