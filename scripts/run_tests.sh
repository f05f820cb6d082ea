#!/usr/bin/env bash
# The README's second command (and CI's, through .ci/run): install what is missing (test
# dependencies included), build everything (CUDA files too when nvcc is present), and run the
# CTest suite but its slow benchmarks (label slow; `scripts/run_tests.sh -L bench` runs every
# bench test). GPU tests skip where no GPU is found; Slurm tests need root.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/install_deps.sh --tests
scripts/build.sh -DTRAINER_TESTS=ON
cd "${BUILD_DIR:-$ROOT/build}"
# Tests labelled slow (benchmarks over 20 s, tests/bench.cmake) stay out of the default run; a
# selection of the caller's own (scripts/run_tests.sh -L bench, -R scaling_bench) replaces that.
select=(-LE slow)
for arg in "$@"; do
  case "$arg" in
    -L* | -LE* | -R* | -E* | --label-regex* | --label-exclude* | --tests-regex* | --exclude-regex*)
      select=() ;;
  esac
done
ctest --output-on-failure --timeout 900 "${select[@]}" "$@"
