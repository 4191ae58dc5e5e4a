"""The papers' recipes: ``configs/<family>/<method>.yaml`` loaded and merged (``config``) and
checked against fairseq's own option dataclasses (``specs``). Not imported by ``--user-dir``.

Beside it: ``runs/`` trains, submits and scores one recipe's run; ``experiments/`` compares
many runs (claims, the grid, tables and plots)."""
