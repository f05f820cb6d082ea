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
# A resume with other MoE keys than the checkpoint's: refused before a tensor is read, naming the
# key that shapes the experts' tensors; the checkpoint left as it was.
saved=part/checkpoints/step-00000010/checkpoint.h5
sum=$(md5sum < "$saved")
for change in "Model.num_experts=8|Model.num_experts: checkpoint 4, config 8" \
    "Model.moe_ffn_hidden_size=48|Model.moe_ffn_hidden_size: checkpoint 32, config 48" \
    "Model.moe_shared_expert_intermediate_size=0|Model.moe_shared_expert_intermediate_size: checkpoint 24, config 0" \
    "Model.moe_layer_freq=1|Model.moe_layer_freq: checkpoint 2, config 1" \
    "Model.moe_first_k_dense=3|Model.moe_first_k_dense: checkpoint 1, config 3" \
    "Model.moe_router_bias_update_rate=0|Model.moe_router_bias_update_rate: checkpoint 0.01, config 0"; do
  expect_error 4 "${change#*|}" run_np 1 train "${COMMON[@]}" -o Distributed.tp_degree=1 \
    -o "${change%%|*}" -o Engine.max_steps=12 -o Engine.output_dir=part --resume auto
done
[ "$(md5sum < "$saved")" = "$sum" ] || fail "a refused resume changed $saved"
# A copy holding one tensor more than its manifest: named as added, not missing.
mkdir -p extra/checkpoints && cp -r part/checkpoints/step-00000010 extra/checkpoints/
copy=extra/checkpoints/step-00000010/checkpoint.h5
tensor=$(h5ls -r "$copy" | awk '$2 == "Dataset" && $1 ~ /^\/model\// && !t { t = $1 } END { print t }')
h5copy -i "$copy" -o "$copy" -s "$tensor" -d "${tensor}_copy"
expect_error 4 "checkpoint tensors added" run_np 1 train "${COMMON[@]}" -o Distributed.tp_degree=1 \
  -o Engine.max_steps=12 -o Engine.output_dir=extra --resume extra/checkpoints/step-00000010
# It learns: the loss falls by more than 0.5 nats in 10 steps, and the MoE losses are logged.
losses full/metrics.jsonl | awk 'NR == 1 { first = $1 } { last = $1 }
  END { if (!(NR == 10 && last < first - 0.5)) { print "losses " first " -> " last; exit 1 } }' ||
  fail "the MoE model's loss does not fall"
[ "$(moe_fields full/metrics.jsonl | wc -l)" = 10 ] || fail "no MoE metrics in metrics.jsonl"
expect_verified part/checkpoints/step-00000005
grep -q "^  experts          4 experts, top-2" inspect.out || { cat inspect.out; fail "inspect shows no experts"; }
grep -q "mlp.experts.gate_up_proj \[4, 64, 64\]" inspect.out || fail "no stacked expert tensor"
echo "MoE checkpoints resume on other layouts, and bit for bit on their own"
# eval of the experts dropless and with a capacity (-o Model.moe_expert_capacity_factor, which
# shapes no tensor): dropless, 4 sequences at a time or one by one give one loss; with tokens
# dropped within each micro-batch they differ, and eval and sample print a note saying so.
eval_loss() {  # CAPACITY B BATCHES
  "$TRAINER" eval part/checkpoints/step-00000010 --data data.h5 -b "$2" --batches "$3" \
    -o Model.moe_expert_capacity_factor="$1" 2> "eval-$1-$2.err" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])["loss"])'
}
dropless=($(eval_loss 0 4 1) $(eval_loss 0 1 4)) dropping=($(eval_loss 0.5 4 1) $(eval_loss 0.5 1 4))
python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-5 * abs(a))' "${dropless[@]}" ||
  fail "dropless eval depends on -b: ${dropless[*]}"
[ "${dropping[0]}" != "${dropping[1]}" ] || fail "eval with capacity 0.5 does not depend on -b: ${dropping[*]}"
grep -q "^note: Model.moe_expert_capacity_factor=0.5 drops tokens within each micro-batch, so the loss depends on -b (4 here" eval-0.5-4.err ||
  { cat eval-0.5-4.err; fail "no capacity note from eval"; }
grep -q "^note:" eval-0-4.err && fail "a capacity note from a dropless eval"
"$TRAINER" sample part/checkpoints/step-00000010 --prompt-ids "1 2 3" -n 2 \
  -o Model.moe_expert_capacity_factor=0.5 > /dev/null 2> sample-note.err || { cat sample-note.err; fail "sample"; }
grep -q "^note: Model.moe_expert_capacity_factor=0.5 drops tokens" sample-note.err ||
  { cat sample-note.err; fail "no capacity note from sample"; }
echo "eval dropless: ${dropless[*]} (any -b); with capacity 0.5: ${dropping[*]} (depends on -b, noted)"
