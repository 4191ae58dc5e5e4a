#!/usr/bin/env bash
# Create .venv and install the package (editable) with every extra, applying
# constraints.txt to all pip calls, build environments included. The `fairseq` extra (the
# plugin's dependencies; the core, layernorm_methods, needs torch alone) is always installed.
# Idempotent: a second run only checks a stamp and returns.
#   VENV=path  where to create the environment (default: .venv)
#   EXTRAS=... which extras to install besides `fairseq` (default: test,plots,slurm,tensorboard,spm,rouge-perl,speech)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
EXTRAS=${EXTRAS:-test,plots,slurm,tensorboard,spm,rouge-perl,speech}
PYTHON=${PYTHON:-python3}
export PIP_CONSTRAINT="$PWD/constraints.txt"
export PIP_DISABLE_PIP_VERSION_CHECK=1

stamp="$VENV/.fairseq_layernorm_plugins.stamp"
want=$(cat pyproject.toml constraints.txt scripts/setup_env.sh scripts/gpu/build_fairseq.sh | sha256sum | cut -d' ' -f1)-$EXTRAS
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$VENV/bin/python" -c "import fairseq_layernorm_plugins" 2>/dev/null; then
    echo "setup_env: $VENV is up to date"
    exit 0
fi

start=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install --progress-bar off)
# torch first, so fairseq's extensions compile against exactly this torch: fairseq-fixed is
# compiled once, by the GPU bundle's own build step (scripts/gpu/build_fairseq.sh), its wheel kept
# in $VENV/fairseq-built/ (tests/test_gpu_install.py installs it on a node-like venv).
"${pip[@]}" "torch==2.13.0" numpy cython "setuptools>=64"
built="$VENV/fairseq-built"
against=$(PYTHON="$VENV/bin/python" bash scripts/gpu/build_fairseq.sh --against)
if [ "$(cat "$built/BUILT_AGAINST" 2>/dev/null)" != "$against" ] || ! ls "$built"/fairseq_fixed-*.whl >/dev/null 2>&1; then
    sdists=$(mktemp -d)
    "$VENV/bin/python" -m pip download --progress-bar off --no-deps --no-binary fairseq-fixed --no-build-isolation \
        -d "$sdists" "$(grep -o 'fairseq-fixed==[0-9.]*' pyproject.toml)"
    PYTHON="$VENV/bin/python" bash scripts/gpu/build_fairseq.sh "$sdists"/fairseq_fixed-*.tar.gz "$built"
    rm -rf "$sdists"
    "${pip[@]}" --no-deps --force-reinstall "$built"/fairseq_fixed-*.whl  # this build, not one installed earlier
fi
"${pip[@]}" --no-deps "$built"/fairseq_fixed-*.whl
"${pip[@]}" -e ".[fairseq${EXTRAS:+,$EXTRAS}]"
"$VENV/bin/python" -c "import fairseq_layernorm_plugins" 
echo "$want" > "$stamp"
echo "setup_env: installed into $VENV in $(( $(date +%s) - start )) s"
