#!/usr/bin/env bash
# Checkpoints of sharded runs hold full tensors: a run saved at step 5 resumes on any stage and
# layout, and steps 6-10 give the losses of an uninterrupted single-rank run (to a relative 1e-5:
# only the reduction order differs), with the step-10 parameters and Adam moments matching (an
# independent HDF5 reader, as checkpoint_layouts.sh). Saved on -> resumed on: stage 3 over 4
# ranks -> one rank (stage 0); one rank -> stage 3 over 4 ranks; stage 2 over 2 ranks with tp2 ->
# stage 3 hybrid (sharding 2 x 2 replicas); stage 1 over 2 ranks -> stage 2 over 4 ranks.
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/checkpoint_lib.sh"
make_small_dataset data.h5
MODEL=("${TINY_LAYOUT_GPT[@]}")
[ "${SHARDING_MODEL:-gpt2}" = llama ] && MODEL=("${TINY_LAYOUT_LLAMA[@]}")
COMMON=("${MODEL[@]}" -o Engine.save_steps=5 -o Optimizer.decay_steps=8)
# layout NAME: the ranks and overrides of a layout name (sK-nN[-tpT][-sdD]: stage K over D of
# the N/T data ranks, D = all of them unless given; single: one rank, nothing sharded).
layout() {
  local tp=1 np=1 stage=0 sd=0
  for part in ${1//-/ }; do
    case $part in single) ;; n*) np=${part#n};; tp*) tp=${part#tp};; sd*) sd=${part#sd};; s*) stage=${part#s};; esac
  done
  local data=$((np / tp))
  [ "$sd" = 0 ] && sd=$data
  NP=$np
  ARGS=(-o Distributed.tp_degree=$tp)
  [ "$stage" = 0 ] || ARGS+=(-o Distributed.dp_degree=$((data / sd)) -o Distributed.sharding.sharding_degree=$sd
                             -o Distributed.sharding.sharding_stage=$stage)
}
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=10 -o Engine.output_dir=single > single.log 2>&1 ||
  fail "uninterrupted single-rank run"
for pair in s3-n4:single single:s3-n4 s2-n4-tp2:s3-n4-sd2 s1-n2:s2-n4; do
  saved_on=${pair%%:*} resumed_on=${pair#*:}
  if [ "$saved_on" = single ]; then
    SAVED=single/checkpoints/step-00000005
  else
    layout "$saved_on"
    run_np "$NP" train "${COMMON[@]}" "${ARGS[@]}" -o Engine.max_steps=5 -o Engine.output_dir="$saved_on" \
      > "$saved_on.log" 2>&1 || { tail -20 "$saved_on.log"; fail "$saved_on run to step 5"; }
    SAVED=$saved_on/checkpoints/step-00000005
    expect_verified "$SAVED"
    compare_step_losses "$saved_on/metrics.jsonl" single/metrics.jsonl 1e-5 || fail "$saved_on steps 1-5"
  fi
  layout "$resumed_on"
  out=$saved_on-to-$resumed_on
  run_np "$NP" train "${COMMON[@]}" "${ARGS[@]}" -o Engine.max_steps=10 -o Engine.output_dir="$out" \
    --resume "$SAVED" > "$out.log" 2>&1 || { tail -20 "$out.log"; fail "resume $out"; }
  grep -q "resumed from $SAVED at step 5 (40 samples consumed)" "$out.log" ||
    fail "$out did not resume at step 5 with 40 samples consumed"
  echo "== $saved_on -> $resumed_on"
  compare_step_losses "$out/metrics.jsonl" single/metrics.jsonl 1e-5 6 || fail "$out: losses differ"
  "$COMPARE_CHECKPOINTS" "$out/checkpoints/step-00000010/checkpoint.h5" \
    single/checkpoints/step-00000010/checkpoint.h5 1e-5 1e-3 || fail "$out: parameters differ"
done
echo "sharded checkpoints resume on every stage and layout as the uninterrupted run goes on"
