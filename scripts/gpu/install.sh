#!/usr/bin/env bash
# Install this repository on an offline GPU node from a bundle made by scripts/gpu/collect.py,
# into the Python environment that already holds the node's CUDA build of torch (kept as it is:
# nothing is downloaded, no torch is installed, packages the node has are left alone).
#
#   bash scripts/gpu/install.sh BUNDLE
#
#   PYTHON=path                 interpreter whose environment receives the packages (default: python3;
#                               for isolation, make one with `python3 -m venv --system-site-packages`)
#   FAIRSEQ_CUDA_EXTENSIONS=1   also compile fairseq's optional CUDA kernels (slow; needs nvcc and
#                               CUDA_HOME); by default they are skipped: translation does not use them
#
# Steps: fairseq-fixed compiled from its sdist against the node's torch (build_fairseq.sh: no
# build isolation, no dependencies: its torchaudio / scikit-learn requirements serve speech code
# only) into a wheel kept in BUNDLE/built/ with what it was built against, so that a node with the same torch,
# Python, numpy and CUDA-kernel choice installs that wheel in seconds (a bundle that is not
# writable builds in a temporary folder and keeps nothing); the names in
# scripts/gpu/requirements*.txt the node lacks (lines marked "exact" at their pinned version);
# this repository in editable mode (fairseq imports --user-dir by folder); then an import check.
# Idempotent: a second run finds everything installed and only checks.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bundle=${1:?usage: bash scripts/gpu/install.sh BUNDLE (a folder made by scripts/gpu/collect.py)}
PYTHON=${PYTHON:-python3}
wheels="$bundle/wheels"
fail() { echo "install: error: $*" >&2; exit 2; }

[ -d "$wheels" ] || fail "$wheels: no such folder (make the bundle with scripts/gpu/collect.py)"
missing=$("$PYTHON" -c '
import importlib.util
need = {"torch": "torch", "numpy": "numpy", "Cython": "cython", "setuptools": "setuptools", "sacrebleu": "sacrebleu", "pip": "pip"}
print(" ".join(label for module, label in need.items() if importlib.util.find_spec(module) is None))
') || fail "$PYTHON does not run"
[ -z "$missing" ] || fail "$PYTHON lacks: $missing; install them first (torch: the node's CUDA build, before anything else)"
# pyproject.toml metadata and the editable install of this repository (PEP 660) need setuptools >= 64
"$PYTHON" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 64)' \
    || fail "$PYTHON has setuptools $("$PYTHON" -c 'import setuptools; print(setuptools.__version__)'); this repository needs >= 64"
if ! "$PYTHON" -c 'import sklearn' 2>/dev/null && ! ls "$wheels"/scikit_learn-*.whl >/dev/null 2>&1; then
    fail "$PYTHON lacks scikit-learn (fairseq imports it) and $bundle has none: install it, or collect with --with-scikit-learn"
fi
start=$(date +%s)
pip=("$PYTHON" -m pip install --no-index --find-links "$wheels" --disable-pip-version-check --progress-bar off)

sdist=$(ls "$wheels"/fairseq_fixed-*.tar.gz 2>/dev/null | head -n 1)
[ -n "$sdist" ] || fail "$wheels: no fairseq_fixed-*.tar.gz"
version=${sdist##*/fairseq_fixed-}
version=${version%.tar.gz}
built="$bundle/built"  # fairseq-fixed's wheel as a node compiled it, and BUILT_AGAINST: what it needs
against=$(bash "$here/build_fairseq.sh" --against)
wheel=$(ls "$built"/fairseq_fixed-"$version"-*.whl 2>/dev/null | head -n 1) || true  # none kept yet
if [ "$("$PYTHON" -m pip show fairseq-fixed 2>/dev/null | sed -n 's/^Version: //p')" = "$version" ]; then
    echo "install: fairseq-fixed $version already installed"
elif [ -n "$wheel" ] && [ "$(cat "$built/BUILT_AGAINST" 2>/dev/null)" = "$against" ]; then
    echo "install: fairseq-fixed $version from $wheel (built against $against)"
    "${pip[@]}" --no-deps "$wheel"
else
    keep=$built
    [ -w "$bundle" ] || keep=$(mktemp -d)/built  # a bundle that is not writable: built in a temporary folder, nothing kept
    bash "$here/build_fairseq.sh" "$sdist" "$keep"
    "${pip[@]}" --no-deps "$(ls "$keep"/fairseq_fixed-"$version"-*.whl)"
    [ "$keep" = "$built" ] || { rm -rf "$(dirname "$keep")" && echo "install: $bundle is not writable: nothing kept"; }
fi

# requirement names without their versions, but for the lines marked "exact"; fairseq-fixed is done
mapfile -t requirements < <(sed -E -e '/^[[:space:]]*(#|$)/d' -e '/^fairseq-fixed/d' -e '/#[[:space:]]*exact/!s/[[:space:]]*==.*//' \
    -e 's/[[:space:]]*#.*//' "$here/requirements.txt" "$here/requirements-scikit-learn.txt")
"${pip[@]}" "${requirements[@]}"
"${pip[@]}" --no-deps --no-build-isolation -e "$repo"
"$PYTHON" -c '
import fairseq, torch
import fairseq_layernorm_plugins
print(f"install: fairseq {fairseq.__version__}, torch {torch.__version__} (CUDA: {torch.cuda.is_available()}), "
      f"fairseq_layernorm_plugins from {fairseq_layernorm_plugins.__path__[0]}")
'
echo "install: done in $(( $(date +%s) - start )) s; next: $PYTHON scripts/gpu/check.py --out gpu_check"
