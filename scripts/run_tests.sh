#!/usr/bin/env bash
# The README's second command (and CI's, through .ci/run): install what is missing (test
# dependencies included), build everything (CUDA files too when nvcc is present), and run the
# whole CTest suite. GPU tests skip where no GPU is found; Slurm tests need root.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/install_deps.sh --tests
scripts/build.sh -DTRAINER_TESTS=ON
cd "${BUILD_DIR:-$ROOT/build}"
ctest --output-on-failure --timeout 900 "$@"
