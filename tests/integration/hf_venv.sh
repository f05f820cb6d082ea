#!/usr/bin/env bash
# The Python that the Hugging Face tests run transformers with: a venv outside the repository
# (TRAINER_HF_VENV, default ~/.cache/trainer-hf-venv) over Debian's python3-torch 1.13
# (--system-site-packages: no PyTorch wheel is downloaded) with transformers 4.46.3 and PEFT
# 0.13.2 (with accelerate 0.34.2, both --no-deps so that pip keeps Debian's torch) from PyPI,
# made on first use. Prints that python's path; exits 77 (the tests' "skipped") when it cannot be
# made: no python3-torch (apt-get install python3-torch python3-venv), or PyPI out of reach.
#   PY=$(bash tests/integration/hf_venv.sh) || exit $?
set -uo pipefail
VENV=${TRAINER_HF_VENV:-$HOME/.cache/trainer-hf-venv}
check() { "$VENV/bin/python" -c 'import torch, transformers, safetensors
assert transformers.__version__ == "4.46.3", transformers.__version__' 2>/dev/null; }
if ! check; then
  /usr/bin/python3 -c 'import torch' 2>/dev/null ||
    { echo "skip: no Debian python3-torch (apt-get install python3-torch python3-venv)" >&2; exit 77; }
  mkdir -p "$(dirname "$VENV")" 2>/dev/null
  exec 9> "$VENV.lock" && flock 9  # one test makes it, the others wait
  if ! check; then
    rm -rf "$VENV"
    { /usr/bin/python3 -m venv --system-site-packages "$VENV" &&
      "$VENV/bin/pip" install --quiet --disable-pip-version-check transformers==4.46.3; } >&2 ||
      { rm -rf "$VENV"; echo "skip: cannot make the transformers venv at $VENV" >&2; exit 77; }
    check || { echo "skip: the venv at $VENV does not import torch and transformers" >&2; exit 77; }
  fi
fi
check_peft() { "$VENV/bin/python" -c 'import peft, accelerate
assert peft.__version__ == "0.13.2", peft.__version__' 2>/dev/null; }
if ! check_peft; then
  exec 9> "$VENV.lock" && flock 9
  check_peft || "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps \
    peft==0.13.2 accelerate==0.34.2 >&2 ||
    { echo "skip: cannot install peft into the venv at $VENV" >&2; exit 77; }
  check_peft || { echo "skip: the venv at $VENV does not import peft" >&2; exit 77; }
fi
echo "$VENV/bin/python"
