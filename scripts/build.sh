#!/usr/bin/env bash
# Configures and builds the trainer into build/ (Release). The CUDA backend is built when nvcc is
# found (TRAINER_CUDA=AUTO), with the cuDNN frontend headers fetched from PyPI first.
#   [BUILD_DIR=DIR] scripts/build.sh [extra cmake -D options, e.g. -DTRAINER_CUDA=OFF]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build}"
cuda=1
for arg in "$@"; do
  [[ ${arg^^} =~ ^-DTRAINER_CUDA(:[A-Z]+)?=OFF$ ]] && cuda=0
done
if [[ $cuda == 1 ]] && { command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; }; then
  "$ROOT/scripts/fetch_cudnn_frontend.sh" || echo "warning: no cuDNN frontend: the GPU path will use its own attention kernels" >&2
fi
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
cmake -S "$ROOT" -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$BUILD" -j "$(nproc)"
