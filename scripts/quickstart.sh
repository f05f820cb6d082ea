#!/usr/bin/env bash
# The README's first command: install what is missing, build, pack a small dataset, and train the
# tiny GPT (configs/tiny-cpu.yaml) on 2 CPU ranks under mpirun, printing the falling loss, then a
# sample of text from the trained model. A second run continues from the first one's checkpoints
# (Checkpoint.resume=auto; an -o Checkpoint.resume=... among the arguments overrides it).
# Text: ../shared/data/tinyshakespeare.txt when it exists, else the licence texts every
# Debian/Ubuntu machine has plus this project's docs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/install_deps.sh
scripts/build.sh
mkdir -p data
if [[ -f ../shared/data/tinyshakespeare.txt ]]; then
  inputs=(../shared/data/tinyshakespeare.txt)
else
  inputs=(/usr/share/common-licenses/* README.md INSTALL.md docs/*.md)
fi
build/src/trainer pack --input "${inputs[@]}" --output data/demo.h5 --val-fraction 0.05 --force
ranks=${RANKS:-2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 ))}
launcher=(mpirun --oversubscribe -n "$ranks")
[[ $(id -u) -eq 0 ]] && launcher+=(--allow-run-as-root)
"${launcher[@]}" build/src/trainer train --config configs/tiny-cpu.yaml \
  -o Data.train_path=data/demo.h5 -o Data.val_path=data/demo.val.h5 -o Checkpoint.resume=auto "$@"
echo "metrics: out/tiny-cpu/metrics.jsonl; checkpoints: out/tiny-cpu/checkpoints"
if [[ -d out/tiny-cpu/checkpoints ]]; then
  echo "a sample from the trained model (trainer sample out/tiny-cpu/checkpoints -n 300 -t 0.8):"
  build/src/trainer sample out/tiny-cpu/checkpoints -n 300 -t 0.8
fi
