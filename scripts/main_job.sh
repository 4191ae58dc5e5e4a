#!/usr/bin/env bash
# The README's first command: set up the environment (idempotent; VENV=path, default
# .venv, as scripts/setup_env.sh), then the main job: every method on Multi30k De-En on
# CPU, BLEU table + loss plot. Arguments go to scripts/main_job.py (see its --help).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
VENV="$VENV" bash scripts/setup_env.sh
exec "$VENV/bin/python" scripts/main_job.py "$@"
