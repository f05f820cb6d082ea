#!/usr/bin/env bash
# Resume on another layout: a checkpoint saved at step 5 on dp2-tp2-pp2 (8 ranks) resumes on tp4,
# dp4, pp2 and one rank; steps 6-10 must give the losses of an uninterrupted single-rank run (to a
# relative 1e-5: only the reduction order differs) with the same consumed_samples (no sample
# skipped or repeated, although the DP size changes), and the step-10 parameters and moments must
# match (an independent HDF5 reader, as parallel_layouts.sh). The tiny GPT's 5 layers split
# unevenly over 2 stages, so the stage boundaries move too. `trainer eval` (one process) of the
# saved checkpoint gives the single-rank run's step-5 loss.
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/checkpoint_lib.sh"
make_small_dataset data.h5
# LAYOUT_MODEL=llama: the same for a llama model (GQA on 2 kv heads, so tp2 instead of tp4).
MODEL=("${TINY_LAYOUT_GPT[@]}") RESUMED_ON="tp4 dp4 pp2 single"
[ "${LAYOUT_MODEL:-gpt2}" = llama ] && MODEL=("${TINY_LAYOUT_LLAMA[@]}") RESUMED_ON="tp2 dp4 pp2 single"
# LAYOUT_MODEL=moe: a model with MoE layers (checkpoint_layouts_moe.sh).
[ "${LAYOUT_MODEL:-gpt2}" = moe ] && MODEL=("${TINY_LAYOUT_MOE[@]}") RESUMED_ON="tp2 dp4 pp2 single"
# LAYOUT_MODEL=moe-ep: the MoE model saved on dp2-tp2-ep2 (its experts split over EP groups of 2
# of the 4 data-parallel ranks), resumed on ep4, tp2, one rank and sh2-ep2 (the optimizer state
# sharded over 2 ranks as well; checkpoint_layouts_ep.sh).
SAVED_AS="dp2-tp2-pp2" SAVED_ON=(-o Distributed.tp_degree=2 -o Distributed.pp_degree=2)
WRITTEN_ON="dp=2 tp=2 pp=2" SAVED_NP=8
[ "${LAYOUT_MODEL:-gpt2}" = moe-ep ] && MODEL=("${TINY_LAYOUT_MOE[@]}") RESUMED_ON="ep4 tp2 single sh2-ep2" \
  SAVED_AS="dp2-tp2-ep2" SAVED_ON=(-o Distributed.tp_degree=2 -o Distributed.ep_degree=2) \
  WRITTEN_ON="dp=4 tp=2 pp=1 ep=2"
# LAYOUT_MODEL=moe-ep-sharded: saved on sh2-ep2 (4 ranks: the optimizer state sharded at stage 1
# over 2 ranks, the experts split over the 2 sharding groups), resumed on ep2 and one rank.
[ "${LAYOUT_MODEL:-gpt2}" = moe-ep-sharded ] && MODEL=("${TINY_LAYOUT_MOE[@]}") \
  RESUMED_ON="ep2 single" SAVED_AS="sh2-ep2" SAVED_NP=4 WRITTEN_ON="dp=4 tp=1 pp=1 ep=2" \
  SAVED_ON=(-o Distributed.ep_degree=2 -o Distributed.sharding.sharding_degree=2)
COMMON=("${MODEL[@]}" -o Engine.save_steps=5 -o Optimizer.decay_steps=8)
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=10 -o Engine.output_dir=single > single.log 2>&1 ||
  fail "uninterrupted single-rank run"
run_np $SAVED_NP train "${COMMON[@]}" -o Engine.max_steps=5 -o Engine.output_dir=saved "${SAVED_ON[@]}" \
  > saved.log 2>&1 || { tail -20 saved.log; fail "$SAVED_AS run to step 5"; }
SAVED=saved/checkpoints/step-00000005
expect_verified $SAVED
grep -q "^  written on       $WRITTEN_ON" inspect.out || fail "the checkpoint does not say $SAVED_AS"
compare_step_losses saved/metrics.jsonl single/metrics.jsonl 1e-5 || fail "$SAVED_AS steps 1-5"
# One process reads a checkpoint of any layout: `trainer eval` of the saved weights gives the loss
# of the single-rank run's step-5 weights.
eval_loss() {
  "$TRAINER" eval "$1" --data data.h5 --batches 8 2> "$2.err" | tail -n 1 |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["loss"])' ||
    { cat "$2.err"; fail "trainer eval $1"; }
}
python3 -c 'import sys; a, b = map(float, sys.argv[1:]); assert abs(a - b) <= 1e-5 * abs(b), (a, b)' \
  "$(eval_loss $SAVED eval-saved)" "$(eval_loss single/checkpoints/step-00000005 eval-single)" ||
  fail "trainer eval of the $SAVED_AS checkpoint differs from the single-rank run's"

for layout in $RESUMED_ON; do
  tp=1 pp=1 ep=1 sh=1 np=1
  case $layout in tp4) tp=4 np=4;; tp2) tp=2 np=2;; dp4) np=4;; pp2) pp=2 np=2;; ep4) ep=4 np=4;;
    ep2) ep=2 np=2;; sh2-ep2) ep=2 sh=2 np=4;; esac
  run_np $np train "${COMMON[@]}" -o Engine.max_steps=10 -o Engine.output_dir=$layout.resumed \
    -o Distributed.tp_degree=$tp -o Distributed.pp_degree=$pp -o Distributed.ep_degree=$ep \
    -o Distributed.sharding.sharding_degree=$sh --resume $SAVED > $layout.log 2>&1 || { tail -20 $layout.log; fail "resume on $layout"; }
  grep -q "resumed from $SAVED at step 5 (40 samples consumed)" $layout.log ||
    fail "$layout did not resume at step 5 with 40 samples consumed"
  echo "== $SAVED_AS -> $layout"
  compare_step_losses $layout.resumed/metrics.jsonl single/metrics.jsonl 1e-5 6 ||
    fail "$layout: losses after the resume differ"
  [ "$(grep -o '"consumed_samples": [0-9]*' $layout.resumed/metrics.jsonl | tail -n 1)" = \
    '"consumed_samples": 80' ] || fail "$layout: not 80 samples consumed after step 10"
  "$COMPARE_CHECKPOINTS" $layout.resumed/checkpoints/step-00000010/checkpoint.h5 \
    single/checkpoints/step-00000010/checkpoint.h5 1e-5 1e-3 || fail "$layout: parameters differ"
done
echo "a $SAVED_AS checkpoint resumes on $RESUMED_ON as the uninterrupted run goes on"
