#!/usr/bin/env bash
# The README's first command: set up .venv (idempotent), then run the small real
# experiment (IWSLT14-mini, Post-LN vs Pre-LN on CPU, BLEU side by side).
# Arguments are passed to scripts/iwslt14_mini_experiment.py (see its --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/python scripts/iwslt14_mini_experiment.py "$@"
