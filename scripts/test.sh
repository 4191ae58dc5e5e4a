#!/usr/bin/env bash
# The README's second command (and CI's): set up the environment (idempotent; VENV=path,
# default .venv, as scripts/setup_env.sh), then run the tests, one pytest worker per core
# (TEST_WORKERS=N to choose; 0 runs them in this process), each test file on one worker, files
# started in the order tests/conftest.py gives (slow ones first; xdist's default would start the
# files with the most tests first, and the slowest files, which have few, last).
# Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
VENV="$VENV" bash scripts/setup_env.sh
# one thread per process (fairseq runs the tests start included): the workers already fill the cores
[ "${TEST_WORKERS:-auto}" = 0 ] || export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec "$VENV/bin/python" -m pytest -n "${TEST_WORKERS:-auto}" --dist loadfile --no-loadscope-reorder "$@"
