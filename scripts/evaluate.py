#!/usr/bin/env python
"""Evaluate runs (the same as ``fairseq-ln-evaluate``; see fairseq_layernorm_plugins/cli.py or --help)."""

from fairseq_layernorm_plugins.cli import evaluate

if __name__ == "__main__":
    evaluate()
