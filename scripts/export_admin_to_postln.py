#!/usr/bin/env python
"""Fold a trained Admin checkpoint into a plain fairseq ``transformer`` checkpoint
(see fairseq_layernorm_plugins/admin_export.py)."""

from fairseq_layernorm_plugins.admin_export import main

if __name__ == "__main__":
    main()
