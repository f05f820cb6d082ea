#!/usr/bin/env bash
# Installs what the local Slurm cluster and the network-namespace tests need (Debian/Ubuntu):
# slurm-wlm (slurmctld, slurmd, srun/sbatch with the PMIx plugin), munge, and iproute2 (ip netns).
# Idempotent: does nothing when every package is already installed. Run as root (CI is root).
set -euo pipefail

packages=(slurm-wlm munge iproute2)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_slurm: already installed: ${packages[*]}"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "error: installing ${missing[*]} (scripts/install_slurm.sh): not root. Run it as root or with sudo." >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The Debian packages may start daemons through their init scripts on systems that have one; the
# test cluster starts its own (scripts/slurm_local_cluster.sh), so leave the packaged ones alone.
echo "install_slurm: installed ${missing[*]}"
