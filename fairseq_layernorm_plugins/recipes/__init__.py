"""The papers' recipes (configs/) and the tools that run them: training launcher,
evaluation, results tables and SLURM submission. Not imported by ``--user-dir``."""
