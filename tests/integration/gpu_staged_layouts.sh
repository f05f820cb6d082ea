#!/usr/bin/env bash
# Parallel layouts on one GPU through host-staged collectives (Distributed.gpu_collectives=mpi:
# every rank on GPU 0, each collective copied to the host and run over MPI): the GPU code of each
# layout against one GPU on the same global batch, with parallel_layouts.sh's checks (losses,
# the MoE layers' aux loss and dropped tokens, final weights and Adam moments). In fp32 on the
# GPU, so that only the reduction order differs; cuBLASLt picks its fp32 GEMM algorithms by
# shape, so the bounds are looser than the CPU's (losses 1e-4 per step, 3e-5 mean; checkpoints
# 1e-4 whole, 1e-2 per tensor). Dense llama layouts and sharding stages 2-3; expert parallelism
# alone and with DP, TP, PP and sharding, dropless and with a capacity. Then `trainer check` on
# two ranks that share the GPU. Skips (77) without a GPU; with several GPUs it still puts every
# rank on the first.
source "$(dirname "$0")/lib.sh"
require_gpus 1
export CUDA_VISIBLE_DEVICES=0
here="$SRC/tests/integration"
export LAYOUT_EXTRA="-o Global.device=cuda -o Engine.mix_precision=fp32 -o Distributed.gpu_collectives=mpi"
export LAYOUT_BOUNDS="1e-4 3e-5 1e-4 1e-2"
LAYOUT_MODEL=llama TRAINER_TEST_LAYOUTS=${STAGED_DENSE_LAYOUTS:-"dp2 tp2 pp2 tp2-sp dp2-z1 sh2-s2 sh2-s3"} \
  bash "$here/parallel_layouts.sh" "$TRAINER" "$SRC" "$SCRATCH/dense" || fail "dense layouts"
LAYOUT_MODEL=moe TRAINER_TEST_LAYOUTS=${STAGED_EP_LAYOUTS:-"ep2 dp2-ep2 tp2-ep2 pp2-ep2 sh2-ep2 sh2-s3-ep2"} \
  bash "$here/parallel_layouts.sh" "$TRAINER" "$SRC" "$SCRATCH/ep" || fail "expert-parallel layouts"
LAYOUT_MODEL=moe-capacity TRAINER_TEST_LAYOUTS=${STAGED_CAPACITY_LAYOUTS:-"ep2 dp2-ep2"} \
  bash "$here/parallel_layouts.sh" "$TRAINER" "$SRC" "$SCRATCH/capacity" || fail "capacity layouts"
# MFU counts the job's GPUs, not its ranks: with every rank on the one GPU, MFU per token/s
# (the model's FLOPs per token over one GPU's peak) is the single-rank run's.
python3 - "$SCRATCH"/dense/single/metrics.jsonl "$SCRATCH"/dense/dp2/metrics.jsonl <<'PY' ||
import json, sys
ratio = lambda path: [r["mfu"] / r["tokens_per_s"] for r in map(json.loads, open(path)) if "mfu" in r]
single, shared = ratio(sys.argv[1]), ratio(sys.argv[2])
assert single and shared and all(abs(x / single[0] - 1) < 1e-5 for x in single + shared), (single, shared)
print("MFU per token/s on two ranks sharing the GPU: the single rank's", single[0])
PY
  fail "MFU of two ranks on one GPU is not counted against that one GPU"
cd "$SCRATCH"
run_check check 0 2 -o Global.device=cuda -o Distributed.gpu_collectives=mpi
grep -q "two ranks on one GPU" check.out && { cat check.out; fail "check refused the shared GPU"; }
echo "PASS"
