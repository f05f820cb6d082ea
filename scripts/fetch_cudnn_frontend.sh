#!/usr/bin/env bash
# Fetches the header-only cuDNN C++ frontend (NVIDIA's cudnn-frontend) into
# .deps/cudnn-frontend/include, where cmake/cuda.cmake looks for cudnn_frontend.h.
#
# The headers come from PyPI's nvidia-cudnn-frontend wheel (it carries the C++ include/ folder),
# pinned below. Debian's packaged frontend does not compile against CUDA 13: do not use it.
# Idempotent: does nothing when the pinned version is already in place.
#
# Usage: scripts/fetch_cudnn_frontend.sh [DEST]   (DEST defaults to <repo>/.deps/cudnn-frontend)
# Environment: CUDNN_FRONTEND_VERSION overrides the pin (1.23.0 or newer).
set -euo pipefail

VERSION="${CUDNN_FRONTEND_VERSION:-1.23.0}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:-$ROOT/.deps/cudnn-frontend}"
STAMP="$DEST/VERSION"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$VERSION" && -f "$DEST/include/cudnn_frontend.h" ]]; then
  echo "cudnn-frontend $VERSION already in $DEST/include"
  exit 0
fi

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
  echo "error: fetching cudnn-frontend (scripts/fetch_cudnn_frontend.sh): '$PYTHON -m pip' is not" \
       "available. Install pip (apt-get install python3-pip) or set PYTHON=<a python with pip>" >&2
  exit 1
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# The wheel is built per Python version, but its headers are the same in every build: ask for one
# fixed build so that the result does not depend on the local Python.
if ! "$PYTHON" -m pip download --no-deps --only-binary=:all: --disable-pip-version-check \
       --python-version 3.11 --platform manylinux_2_28_x86_64 \
       "nvidia-cudnn-frontend==$VERSION" -d "$WORK" >"$WORK/pip.log" 2>&1; then
  cat "$WORK/pip.log" >&2
  echo "error: fetching cudnn-frontend $VERSION (scripts/fetch_cudnn_frontend.sh): pip download" \
       "failed (log above). Check access to PyPI, or set CUDNN_FRONTEND_INCLUDE_DIR to an" \
       "existing include/ folder" >&2
  exit 1
fi

WHEEL="$(ls "$WORK"/nvidia_cudnn_frontend-*.whl | head -n 1)"
# A wheel is a zip file; python's zipfile avoids depending on unzip.
"$PYTHON" - "$WHEEL" "$WORK/unpacked" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    members = [m for m in wheel.namelist() if m.startswith("include/")]
    if not any(m.endswith("/cudnn_frontend.h") for m in members):
        sys.exit("error: the wheel has no include/cudnn_frontend.h")
    wheel.extractall(sys.argv[2], members)
PY

mkdir -p "$DEST"
rm -rf "$DEST/include"
mv "$WORK/unpacked/include" "$DEST/include"
echo "$VERSION" >"$STAMP"
echo "cudnn-frontend $VERSION headers in $DEST/include"
