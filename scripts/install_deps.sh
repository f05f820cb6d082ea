#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages the trainer builds and runs with (INSTALL.md says what each
# is for). Idempotent: installs only what is missing. Uses sudo when not root.
#   scripts/install_deps.sh          build + run dependencies
#   scripts/install_deps.sh --tests  also what the test suite needs (Slurm, munge, iproute2)
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config python3 python3-pip
          openmpi-bin libopenmpi-dev libhdf5-dev hdf5-tools zlib1g-dev libyaml-cpp-dev
          libboost-program-options-dev libgtest-dev
          libpcre2-dev libutf8proc-dev nlohmann-json3-dev libsentencepiece-dev)
if [[ "${1:-}" == "--tests" ]]; then
  # procps: pgrep in the kill tests; python3-regex: the BPE reference encoder (bpe_pack.sh);
  # python3-torch, python3-venv: the transformers venv of hf_llama.sh (tests/integration/hf_venv.sh);
  # python3-psutil, python3-yaml: what PEFT and accelerate import there (installed --no-deps)
  packages+=(slurm-wlm munge iproute2 util-linux procps python3-regex python3-torch python3-venv
            python3-psutil python3-yaml)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: everything is installed"
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || {
    echo "error: missing packages (${missing[*]}) and no sudo: install them as root" >&2
    exit 1
  }
  SUDO=sudo
fi
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
