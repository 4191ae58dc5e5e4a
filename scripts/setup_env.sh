#!/usr/bin/env bash
# Create .venv and install the package (editable) with every extra, applying
# constraints.txt to all pip calls, build environments included.
# Idempotent: a second run only checks a stamp and returns.
#   VENV=path  where to create the environment (default: .venv)
#   EXTRAS=... which extras to install (default: test,plots,slurm,tensorboard,spm)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
EXTRAS=${EXTRAS:-test,plots,slurm,tensorboard,spm}
PYTHON=${PYTHON:-python3}
export PIP_CONSTRAINT="$PWD/constraints.txt"
export PIP_DISABLE_PIP_VERSION_CHECK=1

stamp="$VENV/.fairseq_layernorm_plugins.stamp"
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)-$EXTRAS
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$VENV/bin/python" -c "import fairseq_layernorm_plugins" 2>/dev/null; then
    echo "setup_env: $VENV is up to date"
    exit 0
fi

start=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install --progress-bar off)
# torch first, so fairseq's extensions compile against exactly this torch.
"${pip[@]}" "torch==2.13.0"
"${pip[@]}" -e ".[${EXTRAS}]"
"$VENV/bin/python" -c "import fairseq_layernorm_plugins" 
echo "$want" > "$stamp"
echo "setup_env: installed into $VENV in $(( $(date +%s) - start )) s"
