#!/usr/bin/env python
"""Results tables and curve plots (the same as ``fairseq-ln-table``; see
fairseq_layernorm_plugins/experiments/report.py or --help)."""

from fairseq_layernorm_plugins.cli import table

if __name__ == "__main__":
    table()
