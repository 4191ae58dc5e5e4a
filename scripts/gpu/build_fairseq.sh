#!/usr/bin/env bash
# Compile fairseq-fixed from its sdist against the torch of $PYTHON (no build isolation, no
# dependencies) into a wheel kept in BUILT/ beside BUILT_AGAINST, the stack it needs: torch,
# Python, numpy major version and CUDA-kernel choice. BUILT is replaced whole or not at all (a
# failed build leaves it as it was, and no staging folder; BUILT's folder must be writable). scripts/gpu/install.sh runs it on a
# GPU node; scripts/setup_env.sh runs it for this machine's venv, whose kept wheel the GPU
# bundle's install test then installs as a node with the same stack would.
#
#   bash scripts/gpu/build_fairseq.sh SDIST BUILT   compile, keep the wheel in BUILT
#   bash scripts/gpu/build_fairseq.sh --against     print what $PYTHON's stack is
#
#   PYTHON=path                 the interpreter whose torch it compiles against (default: python3)
#   FAIRSEQ_CUDA_EXTENSIONS=1   also compile fairseq's optional CUDA kernels (slow; needs nvcc
#                               and CUDA_HOME); by default skipped: translation does not use them
set -euo pipefail
PYTHON=${PYTHON:-python3}
against=$("$PYTHON" -c '
import sys, numpy, torch
numpy_major = numpy.__version__.split(".")[0]
print(f"torch {torch.__version__}, cp{sys.version_info.major}{sys.version_info.minor}, numpy {numpy_major}", end="")
')", CUDA kernels ${FAIRSEQ_CUDA_EXTENSIONS:-0}"
if [ "${1:-}" = --against ]; then
    echo "$against"
    exit 0
fi
sdist=${1:?usage: bash scripts/gpu/build_fairseq.sh SDIST BUILT}
built=${2:?usage: bash scripts/gpu/build_fairseq.sh SDIST BUILT}
version=${sdist##*/fairseq_fixed-}
version=${version%.tar.gz}
echo "build: compiling fairseq-fixed $version against $against (a few minutes) ..."
staging=$(mktemp -d "$(dirname "$built")/.built.XXXXXX")  # beside BUILT: moved into place in one step
trap 'rm -rf "$staging"' EXIT
wheel_cmd=("$PYTHON" -m pip wheel --no-index --disable-pip-version-check --progress-bar off
    --no-build-isolation --no-deps --wheel-dir "$staging" "$sdist")
if [ "${FAIRSEQ_CUDA_EXTENSIONS:-0}" = 1 ]; then
    "${wheel_cmd[@]}"
else  # fairseq's setup.py adds its CUDA kernels whenever CUDA_HOME is set
    env -u CUDA_HOME "${wheel_cmd[@]}"
fi
ls "$staging"/fairseq_fixed-"$version"-*.whl >/dev/null
printf '%s\n' "$against" >"$staging/BUILT_AGAINST"
# kept whole or not at all: another node may be reading it
rm -rf "$built.old" && { [ ! -e "$built" ] || mv "$built" "$built.old"; } && mv "$staging" "$built" && rm -rf "$built.old"
trap - EXIT
echo "build: kept the wheel in $built for $against"
