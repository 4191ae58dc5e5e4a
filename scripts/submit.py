#!/usr/bin/env python
"""Submit runs to SLURM (the same as ``fairseq-ln-submit``; see fairseq_layernorm_plugins/cli.py or --help)."""

from fairseq_layernorm_plugins.cli import submit

if __name__ == "__main__":
    submit()
