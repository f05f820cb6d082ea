#!/usr/bin/env bash
# Checkpoints under expert parallelism: the MoE model saved at step 5 on dp2-tp2-ep2 (8 ranks:
# TP 2 x 4 data-parallel ranks, the experts split over EP groups of 2) resumes on ep4, on tp2 and
# on one rank, each continuing the uninterrupted single-rank run (checkpoint_layouts.sh's bounds);
# and a run stopped at step 5 on tp2-ep2 and resumed there is bit-identical to the uninterrupted
# tp2-ep2 run (losses, MoE metrics, parameters and moments). The experts are whole tensors in
# the checkpoint: the save gathers them from the EP ranks, each resume reads its own slice.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/checkpoint_lib.sh"
make_small_dataset data.h5
COMMON=("${TINY_LAYOUT_MOE[@]}" -o Engine.save_steps=5 -o Optimizer.decay_steps=8)
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=10 -o Engine.output_dir=single > single.log 2>&1 ||
  fail "uninterrupted single-rank run"
run_np 8 train "${COMMON[@]}" -o Engine.max_steps=5 -o Engine.output_dir=saved \
  -o Distributed.tp_degree=2 -o Distributed.ep_degree=2 > saved.log 2>&1 ||
  { tail -20 saved.log; fail "dp2-tp2-ep2 run to step 5"; }
SAVED=saved/checkpoints/step-00000005
expect_verified $SAVED
grep -q "^  written on       dp=4 tp=2 pp=1 ep=2" inspect.out || { cat inspect.out; fail "the checkpoint does not say dp=4 tp=2 ep=2"; }
grep -q "mlp.experts.gate_up_proj \[4, 64, 64\]" inspect.out || fail "the experts are not whole tensors"
compare_step_losses saved/metrics.jsonl single/metrics.jsonl 1e-5 || fail "dp2-tp2-ep2 steps 1-5"
for layout in ep4 tp2 single; do
  tp=1 ep=1 np=1
  case $layout in ep4) ep=4 np=4;; tp2) tp=2 np=2;; esac
  run_np $np train "${COMMON[@]}" -o Engine.max_steps=10 -o Engine.output_dir=$layout.resumed \
    -o Distributed.tp_degree=$tp -o Distributed.ep_degree=$ep --resume $SAVED \
    > $layout.log 2>&1 || { tail -20 $layout.log; fail "resume on $layout"; }
  grep -q "resumed from $SAVED at step 5 (40 samples consumed)" $layout.log ||
    fail "$layout did not resume at step 5 with 40 samples consumed"
  echo "== dp2-tp2-ep2 -> $layout"
  compare_step_losses $layout.resumed/metrics.jsonl single/metrics.jsonl 1e-5 6 ||
    fail "$layout: losses after the resume differ"
  "$COMPARE_CHECKPOINTS" $layout.resumed/checkpoints/step-00000010/checkpoint.h5 \
    single/checkpoints/step-00000010/checkpoint.h5 1e-5 1e-3 || fail "$layout: parameters differ"
done
# Bit-exact on the same layout.
SAME=(-o Distributed.tp_degree=2 -o Distributed.ep_degree=2 -o Checkpoint.keep_last=0)
run_np 4 train "${COMMON[@]}" "${SAME[@]}" -o Engine.max_steps=10 -o Engine.output_dir=full \
  > full.log 2>&1 || { tail -20 full.log; fail "uninterrupted tp2-ep2 run"; }
run_np 4 train "${COMMON[@]}" "${SAME[@]}" -o Engine.max_steps=5 -o Engine.output_dir=part \
  > part.a.log 2>&1 || { tail -20 part.a.log; fail "tp2-ep2 run to step 5"; }
run_np 4 train "${COMMON[@]}" "${SAME[@]}" -o Engine.max_steps=10 -o Engine.output_dir=part \
  --resume auto > part.b.log 2>&1 || { tail -20 part.b.log; fail "tp2-ep2 resumed to step 10"; }
grep -q "resumed from" part.b.log || fail "tp2-ep2 did not resume"
diff <(losses full/metrics.jsonl) <(losses part/metrics.jsonl) ||
  fail "tp2-ep2: resumed losses are not bit-identical"
diff <(moe_fields full/metrics.jsonl) <(moe_fields part/metrics.jsonl) ||
  fail "tp2-ep2: resumed MoE metrics differ"
"$COMPARE_CHECKPOINTS" full/checkpoints/step-00000010/checkpoint.h5 \
  part/checkpoints/step-00000010/checkpoint.h5 0 || fail "tp2-ep2: parameters differ after resume"
echo "an EP checkpoint resumes on ep4, tp2 and one rank, and bit for bit on its own layout"
