#!/usr/bin/env bash
# The README's second command (and CI's): set up the environment (idempotent; VENV=path,
# default .venv, as scripts/setup_env.sh), then run the tests, one pytest worker per core
# (TEST_WORKERS=N to choose; 0 runs them in this process), each test file on one worker.
# Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
VENV="$VENV" bash scripts/setup_env.sh
exec "$VENV/bin/python" -m pytest -n "${TEST_WORKERS:-auto}" --dist loadfile "$@"
