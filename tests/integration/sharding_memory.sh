#!/usr/bin/env bash
# Memory per rank of each sharding stage, measured against `trainer plan`: at 1, 2 and 4 CPU
# ranks (sharded over all of them), stages 0-3 train two steps and print the host allocator's
# high-water mark (every buffer of the model and optimizer, counted by the backend as it hands
# them out); it must be within 5% of the arena `trainer plan` prints for that stage and layout.
# The stages must also save what the ZeRO formulas say: from stage 0 to 3 the arena falls. With
# sharding_offload, the offloaded state's and staging ring's host memory matches the plan too.
source "$(dirname "$0")/lib.sh"
within_5_percent() {  # name measured planned
  python3 -c "import sys; m, p = int(sys.argv[1]), int(sys.argv[2]); sys.exit(abs(m - p) > 0.05 * p)" \
    "$2" "$3" || fail "$1: measured $2 bytes, more than 5% from the plan's $3"
}
make_small_dataset data.h5
COMMON=("${TINY_LAYOUT_GPT[@]}" -o Engine.max_steps=2 -o Global.global_batch_size=8)
for np in 1 2 4; do
  "$TRAINER" plan "${COMMON[@]}" --world-size "$np" > "plan$np.txt" || fail "trainer plan --world-size $np"
  previous=0
  for stage in 0 1 2 3; do
    if [ "$stage" = 0 ]; then sharding=(-o Distributed.sharding.sharding_degree=1)
    else sharding=(-o Distributed.dp_degree=1 -o Distributed.sharding.sharding_degree="$np"
                   -o Distributed.sharding.sharding_stage="$stage"); fi
    name="np$np-stage$stage"
    run_np "$np" train "${COMMON[@]}" -o Engine.output_dir="$name" "${sharding[@]}" > "$name.log" 2>&1 ||
      { tail -20 "$name.log"; fail "$name exited non-zero"; }
    measured=$(sed -n 's/.*allocator high-water mark \([0-9]*\) bytes per rank.*/\1/p' "$name.log")
    planned=$(sed -n "s/^    sharding stage $stage: .*(\([0-9]*\) bytes)\$/\1/p" "plan$np.txt")
    [ -n "$measured" ] && [ -n "$planned" ] || fail "$name: no measured ($measured) or planned ($planned) figure"
    echo "$name: measured $measured bytes, trainer plan $planned bytes"
    within_5_percent "$name" "$measured" "$planned"
    if [ "$np" -gt 1 ] && [ "$previous" -gt 0 ]; then
      [ "$measured" -lt "$previous" ] || fail "$name: $measured bytes, not below the stage before ($previous)"
    fi
    previous=$measured
  done
done
# sharding_offload: the host memory of the offloaded state and its staging ring (the offloaded
# optimizer's allocator high-water mark) against the bytes `trainer plan` prints for it, on one
# rank and at stage 1 over two.
for np in 1 2; do
  offload=(-o Distributed.sharding.sharding_offload=true)
  [ "$np" -gt 1 ] && offload+=(-o Distributed.dp_degree=1 -o Distributed.sharding.sharding_degree="$np"
                               -o Distributed.sharding.sharding_stage=1)
  name="np$np-offload"
  "$TRAINER" plan "${COMMON[@]}" "${offload[@]}" --world-size "$np" > "$name-plan.txt" ||
    fail "trainer plan $name"
  run_np "$np" train "${COMMON[@]}" -o Engine.output_dir="$name" "${offload[@]}" > "$name.log" 2>&1 ||
    { tail -20 "$name.log"; fail "$name exited non-zero"; }
  measured=$(sed -n 's/.*offloaded optimizer host high-water mark \([0-9]*\) bytes per rank.*/\1/p' "$name.log" | head -1)
  planned=$(sed -n 's/.*sharding_offload keeps .* (outside the arena; \([0-9]*\) bytes)$/\1/p' "$name-plan.txt")
  [ -n "$measured" ] && [ -n "$planned" ] || fail "$name: no measured ($measured) or planned ($planned) figure"
  echo "$name: measured $measured bytes of offloaded host memory, trainer plan $planned bytes"
  within_5_percent "$name" "$measured" "$planned"
done
# Pipeline stages with data parallelism (pp2 x dp2, micro-batch 4 of a global 8: one micro-batch a
# data rank, so one 1F1B slot): the stage-0 row counts one data rank's micro-batches (it counted
# the global batch's, one slot of activations too many).
pp=(-o Distributed.pp_degree=2 -o Global.micro_batch_size=4)
"$TRAINER" plan "${COMMON[@]}" "${pp[@]}" --world-size 4 > plan-pp2.txt || fail "trainer plan pp2 dp2"
run_np 4 train "${COMMON[@]}" "${pp[@]}" -o Engine.output_dir=pp2dp2 > pp2dp2.log 2>&1 ||
  { tail -20 pp2dp2.log; fail "pp2 dp2 exited non-zero"; }
measured=$(sed -n 's/.*allocator high-water mark \([0-9]*\) bytes per rank.*/\1/p' pp2dp2.log)
planned=$(sed -n "s/^    sharding stage 0: .*(\([0-9]*\) bytes)\$/\1/p" plan-pp2.txt)
[ -n "$measured" ] && [ -n "$planned" ] || fail "pp2 dp2: no measured ($measured) or planned ($planned) figure"
echo "pp2 dp2 (pipeline stage 0): measured $measured bytes, trainer plan's stage-0 row $planned bytes"
within_5_percent "pp2 dp2" "$measured" "$planned"
echo "every stage's memory matches trainer plan"
