#!/usr/bin/env python
"""Results tables and curve plots from evaluated runs: see
fairseq_layernorm_plugins/recipes/report.py (or --help)."""

from fairseq_layernorm_plugins.recipes.report import main

if __name__ == "__main__":
    main()
