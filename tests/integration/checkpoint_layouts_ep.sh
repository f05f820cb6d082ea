#!/usr/bin/env bash
# Checkpoints under expert parallelism: the MoE model saved at step 5 on dp2-tp2-ep2 (8 ranks:
# TP 2 x 4 data-parallel ranks, the experts split over EP groups of 2) resumes on ep4, on tp2, on
# one rank and on sh2-ep2 (the optimizer state sharded too), each continuing the uninterrupted single-rank run (checkpoint_layouts.sh); and a
# run stopped at step 5 on tp2-ep2 and resumed there is bit-identical to the uninterrupted tp2-ep2
# run (losses, MoE metrics, parameters and moments); one saved on sh2-ep2 (the optimizer state
# sharded at stage 1 as well) resumes on ep2 and on one rank. The experts are whole tensors in
# the checkpoint: the save gathers them from the EP ranks, each resume reads its own slice.
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/checkpoint_lib.sh"
LAYOUT_MODEL=moe-ep bash "$TESTS_DIR/checkpoint_layouts.sh" "$TRAINER" "$SRC" "$SCRATCH/layouts"
grep -q "mlp.experts.gate_up_proj \[4, 64, 64\]" "$SCRATCH/layouts/inspect.out" ||
  fail "the experts are not whole tensors in the checkpoint"
LAYOUT_MODEL=moe-ep-sharded bash "$TESTS_DIR/checkpoint_layouts.sh" "$TRAINER" "$SRC" \
  "$SCRATCH/sharded"
grep -q "mlp.experts.gate_up_proj \[4, 64, 64\]" "$SCRATCH/sharded/inspect.out" ||
  fail "the experts are not whole tensors in the sharded EP checkpoint"
make_small_dataset data.h5
COMMON=("${TINY_LAYOUT_MOE[@]}" -o Engine.save_steps=5 -o Optimizer.decay_steps=8
        -o Checkpoint.keep_last=0)
resume_bit_exact tp2-ep2 4 -o Distributed.tp_degree=2 -o Distributed.ep_degree=2
echo "an EP checkpoint resumes on ep4, tp2, one rank and sh2-ep2, and bit for bit on its own layout;" \
  "a sharded one (sh2-ep2) on ep2 and one rank"
