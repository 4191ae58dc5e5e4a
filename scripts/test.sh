#!/usr/bin/env bash
# The README's second command (and CI's): set up .venv (idempotent), then run the tests.
# Arguments are passed to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/python -m pytest "$@"
