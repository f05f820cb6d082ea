#!/usr/bin/env bash
# Checkpoints of a model with MoE layers: saved on dp2-tp2-pp2 and resumed on tp2, dp4, pp2 and
# one rank, each continuing the uninterrupted single-rank run (checkpoint_layouts.sh); and stopped
# at step 5 on dp2-tp2 (where the loss must fall) and resumed there, bit-identical to the uninterrupted dp2-tp2 run (losses,
# the MoE fields of the metrics, parameters and moments). The experts are whole tensors in the
# checkpoint, so the layout they were saved from does not matter.
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/checkpoint_lib.sh"
LAYOUT_MODEL=moe bash "$TESTS_DIR/checkpoint_layouts.sh" "$TRAINER" "$SRC" "$SCRATCH/layouts"
make_small_dataset data.h5
COMMON=("${TINY_LAYOUT_MOE[@]}" -o Engine.save_steps=5 -o Optimizer.decay_steps=8
        -o Distributed.tp_degree=2 -o Checkpoint.keep_last=0)
resume_bit_exact dp2-tp2 4
# It learns: the loss falls by more than 0.5 nats in 10 steps, and the MoE losses are logged.
losses full/metrics.jsonl | awk 'NR == 1 { first = $1 } { last = $1 }
  END { if (!(NR == 10 && last < first - 0.5)) { print "losses " first " -> " last; exit 1 } }' ||
  fail "the MoE model's loss does not fall"
[ "$(moe_fields full/metrics.jsonl | wc -l)" = 10 ] || fail "no MoE metrics in metrics.jsonl"
expect_verified part/checkpoints/step-00000005
grep -q "^  experts          4 experts, top-2" inspect.out || { cat inspect.out; fail "inspect shows no experts"; }
grep -q "mlp.experts.gate_up_proj \[4, 64, 64\]" inspect.out || fail "no stacked expert tensor"
echo "MoE checkpoints resume on other layouts, and bit for bit on their own"
