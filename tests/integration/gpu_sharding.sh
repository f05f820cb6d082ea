#!/usr/bin/env bash
# Sharding stages on GPUs (skipped, exit 77, without a GPU). On one GPU, sharding_offload (the
# master weights and moments in host memory, AdamW on the CPU) follows the one-GPU curve and
# leaves less GPU memory in use. On two GPUs,
# stages 1, 2 and 3 (bf16; stages 2-3 with and without the communication stream and the stage-3
# prefetch) follow the unsharded dp2 curve within bf16 tolerance, and the GPU memory each run logs
# falls from stage 1 to stage 3; a stage-3 checkpoint resumes on one GPU and continues the
# stage-3 curve, and stage 3 with offload follows the dp2 curve; on four GPUs, hybrid stage 3
# (sharding 2 x 2 replicas) follows the dp4 curve.
source "$(dirname "$0")/lib.sh"
require_gpus 1
make_small_dataset data.h5
# Eight blocks: stage 2's two gradient buckets of a block then take less than the whole gradients.
cat > gpu.yaml <<'YAML'
Global: {device: cuda, global_batch_size: 16, micro_batch_size: 4}
Model: {hidden_size: 256, num_layers: 8, num_heads: 4, max_seq_len: 128}
Distributed: {zero_stage1: false}
Engine: {max_steps: 50, logging_freq: 1, eval_freq: 0, save_steps: 0}
Optimizer: {lr: 1.0e-3, warmup_steps: 5}
Data: {train_path: data.h5, val_fraction: 0}
YAML
COMMON=(-c gpu.yaml)
train() { run_layout "$@"; }  # name np overrides...
memory_gib() { grep -o '"memory_gib": [^,}]*' "$1/metrics.jsonl" | tail -n 1 | awk '{print $2}'; }
below() { python3 -c "import sys; sys.exit(not float(sys.argv[1]) < float(sys.argv[2]))" "$@"; }
train gpu1 1
train gpu1-offload 1 -o Distributed.sharding.sharding_offload=true
compare_curves gpu1-offload/metrics.jsonl gpu1/metrics.jsonl 0.01 0.002 50 || fail "offload leaves the one-GPU curve"
below "$(memory_gib gpu1-offload)" "$(memory_gib gpu1)" || fail "offload does not lower the GPU memory"
[ "$GPUS" -ge 2 ] || { echo "one GPU: the sharding stages need two (skipped)"; exit 0; }
train dp2 2
previous=0
for stage in 1 2 3; do
  name=s$stage
  train $name 2 -o Distributed.sharding.sharding_degree=2 -o Distributed.sharding.sharding_stage=$stage \
    -o Engine.save_steps=25 -o Checkpoint.keep_last=0
  echo "== $name against dp2 (memory $(memory_gib $name) GiB)"
  compare_curves $name/metrics.jsonl dp2/metrics.jsonl 0.05 0.01 50 || fail "$name leaves the dp2 curve"
  if [ "$stage" -gt 1 ]; then
    below "$(memory_gib $name)" "$previous" || fail "$name: GPU memory $(memory_gib $name) GiB not below $previous"
  fi
  previous=$(memory_gib $name)
done
for variant in "s2-inline -o Distributed.sharding.sharding_stage=2 -o Distributed.sharding.reduce_overlap=false" \
               "s3-noprefetch -o Distributed.sharding.sharding_stage=3 -o Distributed.sharding.broadcast_overlap=false" \
               "s3-offload -o Distributed.sharding.sharding_stage=3 -o Distributed.sharding.sharding_offload=true"; do
  read -r -a args <<< "$variant"
  train "${args[0]}" 2 -o Distributed.sharding.sharding_degree=2 "${args[@]:1}"
  compare_curves "${args[0]}/metrics.jsonl" dp2/metrics.jsonl 0.05 0.01 50 || fail "${args[0]} leaves the dp2 curve"
done
# Stage 3's full-tensor checkpoint at step 25 on one GPU (nothing sharded).
mkdir -p s3-to-one/checkpoints && cp -r s3/checkpoints/step-00000025 s3-to-one/checkpoints/
train s3-to-one 1 -o Checkpoint.resume=auto
grep -q "resumed from .*step-00000025 at step 25" s3-to-one.log ||
  fail "s3-to-one did not resume at step 25"
compare_curves s3-to-one/metrics.jsonl s3/metrics.jsonl 0.01 0.002 25 || fail "s3-to-one leaves the stage-3 curve"
if [ "$GPUS" -ge 4 ]; then
  train dp4 4
  train hybrid-s3 4 -o Distributed.dp_degree=2 -o Distributed.sharding.sharding_degree=2 \
    -o Distributed.sharding.sharding_stage=3
  compare_curves hybrid-s3/metrics.jsonl dp4/metrics.jsonl 0.05 0.01 50 || fail "hybrid-s3 leaves the dp4 curve"
fi
echo "sharding stages on GPUs follow the unsharded curve"
