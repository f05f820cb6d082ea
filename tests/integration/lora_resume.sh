#!/usr/bin/env bash
# LoRA checkpoints: a full run's checkpoint is the base (Checkpoint.init_from); LoRA runs train
# adapters on it. Stopping after 10 steps and resuming to 20 gives bit-identical losses and
# adapters to 20 uninterrupted steps (one rank, and dp2 with ZeRO-1); the step-10 checkpoint
# resumed on tp2-pp2 follows the same run (1e-5). The checkpoints hold the adapters only and name
# their base (that training leaves the base bit-identical is lora_test's).
source "$(dirname "$0")/lib.sh"
make_small_dataset data.h5
MODEL=("${TINY_LAYOUT_LLAMA[@]}" -o Model.num_layers=4 -o Checkpoint.keep_last=0)
run_np 1 train "${MODEL[@]}" -o Engine.max_steps=5 -o Engine.save_steps=5 \
  -o Engine.output_dir=base > base.log 2>&1 || { tail base.log; fail "base run"; }
BASE=base/checkpoints/step-00000005
LORA=("${MODEL[@]}" -o Model.lora_rank=4 -o Model.lora_alpha=8 -o Model.lora_targets=q,v,o,down
      -o Optimizer.lr=1e-2 -o Checkpoint.init_from=$BASE -o Engine.save_steps=10)
for variant in 1 2z; do
  np=${variant:0:1}
  extra=()
  [ "$variant" = 2z ] && extra=(-o Distributed.zero_stage1=true)
  run_np $np train "${LORA[@]}" "${extra[@]}" -o Engine.max_steps=20 -o Engine.output_dir=full$variant \
    > full$variant.log 2>&1 || { tail full$variant.log; fail "uninterrupted LoRA run ($variant)"; }
  grep -q "base weights are frozen, from $BASE" full$variant.log || fail "$variant: base not named"
  run_np $np train "${LORA[@]}" "${extra[@]}" -o Engine.max_steps=10 -o Optimizer.decay_steps=18 \
    -o Engine.output_dir=part$variant > part$variant.a.log 2>&1 || fail "first half ($variant)"
  run_np $np train "${LORA[@]}" "${extra[@]}" -o Engine.max_steps=20 -o Engine.output_dir=part$variant \
    --resume auto > part$variant.b.log 2>&1 || { tail part$variant.b.log; fail "resumed half ($variant)"; }
  grep -q "resumed from" part$variant.b.log || fail "$variant did not resume"
  diff <(losses full$variant/metrics.jsonl) <(losses part$variant/metrics.jsonl) ||
    fail "$variant: resumed LoRA losses are not bit-identical"
  "$COMPARE_CHECKPOINTS" full$variant/checkpoints/step-00000020/checkpoint.h5 \
    part$variant/checkpoints/step-00000020/checkpoint.h5 0 || fail "$variant: adapters differ"
done
# The adapters only (q, v, o, down of 4 blocks: 32 tensors), and the base they apply to.
"$TRAINER" inspect full1/checkpoints/step-00000020 > inspect.log || fail "inspect"
grep -q "LoRA adapters of Checkpoint.init_from=$BASE" inspect.log || { cat inspect.log; fail "no base named"; }
grep -q "tensors (32 under /model" inspect.log || { cat inspect.log; fail "not the adapters only"; }
! grep -q "q_proj.weight \|embed_tokens" inspect.log || fail "base weights in a LoRA checkpoint"
# On another layout: step 10 of the single-rank run resumed on tp2-pp2 (adapters split by TP).
mkdir -p cross/checkpoints && cp -r part1/checkpoints/step-00000010 cross/checkpoints/
run_np 4 train "${LORA[@]}" -o Distributed.tp_degree=2 -o Distributed.pp_degree=2 \
  -o Model.sequence_parallel=true -o Engine.max_steps=20 -o Engine.output_dir=cross --resume auto \
  > cross.log 2>&1 || { tail cross.log; fail "tp2-pp2 resume"; }
grep -q "resumed from" cross.log || fail "tp2-pp2 did not resume"
compare_curves cross/metrics.jsonl full1/metrics.jsonl 1e-5 1e-5 10 || fail "tp2-pp2 losses differ"
"$COMPARE_CHECKPOINTS" full1/checkpoints/step-00000020/checkpoint.h5 \
  cross/checkpoints/step-00000020/checkpoint.h5 1e-5 1e-3 || fail "tp2-pp2 adapters differ"
echo "LoRA resume is bit-identical on one rank and dp2-z1, and tp2-pp2 resumes one rank's checkpoint"
