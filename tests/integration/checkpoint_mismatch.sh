#!/usr/bin/env bash
# Checkpoints that do not fit the run, each refused on both ranks with exit 4 and one line:
# - Checkpoint.init_from of a GPT checkpoint with biases into a Model.bias=false config: the key
#   named (Model.bias), and where the saved config hides it, the tensors the model has no place
#   for (not dropped);
# - a LoRA resume whose config names another base: another Checkpoint.init_from, or without one
#   another Global.seed; the line names both bases, each resolved (absolute file, step, bytes);
# - a relative init_from read from another folder (trainer eval), and a checkpoint folder as
#   init_from whose newest step moved on after the LoRA run started (resume, export --lora
#   merge): refused the same way; the same base by another path, or its step named, resumes,
#   and a copy of it in another folder (the same weights' CRC-32s) is taken for it; a sharded
#   Hugging Face base with one shard rewritten (its size changed) is refused;
# - a LoRA checkpoint resumed with Model.lora_rank=0, or given as a full run's init_from: "holds
#   LoRA adapters", pointing to `trainer export --lora merge`;
# - a full checkpoint resumed with Model.lora_rank > 0: "holds a model's weights, not LoRA
#   adapters".
# And the accepted cases next to them: the same base resumes; an adapter export with the base
# gone is written (a merge is refused).
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/checkpoint_lib.sh"
make_small_dataset data.h5
COMMON=(-o Data.train_path=data.h5 -o Data.val_fraction=0 -o Global.device=cpu
        -o Model.hidden_size=32 -o Model.num_layers=2 -o Model.num_heads=2 -o Model.max_seq_len=32
        -o Global.global_batch_size=4 -o Global.micro_batch_size=2 -o Engine.logging_freq=1
        -o Engine.eval_freq=0 -o Engine.save_steps=2 -o Engine.max_steps=2)
LORA=(-o Model.lora_rank=2 -o Model.lora_alpha=4 -o Model.lora_targets=c_attn,c_fc)

# refused NAME PATTERN COMMAND...: COMMAND exits 4 with one error line matching PATTERN (lib.sh).
refused() {
  local name=$1 pattern=$2
  shift 2
  expect_error 4 "$pattern" "$@"
  echo "ok: $name: $(grep '^error: ' err.log | cut -c1-160)..."
}

run_np 2 train "${COMMON[@]}" -o Engine.output_dir=base > base.log 2>&1 || { tail base.log; fail "base"; }
run_np 2 train "${COMMON[@]}" -o Engine.output_dir=other -o Global.seed=7 > other.log 2>&1 ||
  { tail other.log; fail "other base"; }
BASE=base/checkpoints/step-00000002
OTHER=other/checkpoints/step-00000002

refused bias_key "$BASE/checkpoint.h5): Model.bias: checkpoint true, config false" \
  run_np 2 train "${COMMON[@]}" -o Model.bias=false -o Checkpoint.init_from=$BASE -o Engine.output_dir=nobias
# The same tensors in a copy whose saved config says bias: false (no key differs): each tensor
# without a place is still named, not dropped.
mkdir -p said_nobias && cp $BASE/checkpoint.h5 said_nobias/
"$CHECKPOINT_CONFIG" said_nobias/checkpoint.h5 | sed 's/^  bias: true$/  bias: false/' > nobias.yaml
"$CHECKPOINT_CONFIG" said_nobias/checkpoint.h5 --set < nobias.yaml || fail "editing the config"
refused extra_tensors "said_nobias/checkpoint.h5 holds /model/transformer.h.0.attn.c_attn.bias \[96\] (and [0-9]* more), which the config's model has no place for" \
  run_np 2 train "${COMMON[@]}" -o Model.bias=false -o Checkpoint.init_from=said_nobias/checkpoint.h5 -o Engine.output_dir=nobias
# inspect checks the tensors against the saved config as the readers do (it said "verifies yes").
refused inspect_extra "said_nobias/checkpoint.h5 holds /model/transformer.h.0.attn.c_attn.bias \[96\]" \
  "$TRAINER" inspect said_nobias/checkpoint.h5
grep -q "^  tensors fit      NO: " out.log || { cat out.log; fail "inspect printed no 'tensors fit NO'"; }

# LoRA on the checkpoint base, and on the seed's initialisation.
run_np 2 train "${COMMON[@]}" "${LORA[@]}" -o Checkpoint.init_from=$BASE -o Engine.output_dir=lora \
  > lora.log 2>&1 || { tail lora.log; fail "LoRA run"; }
run_np 2 train "${COMMON[@]}" "${LORA[@]}" -o Engine.output_dir=seeded > seeded.log 2>&1 ||
  { tail seeded.log; fail "LoRA run on the seed's base"; }
refused other_base "LoRA base differs (lora/checkpoints/step-00000002/checkpoint.h5): its adapters were trained on Checkpoint.init_from=$BASE ($PWD/$BASE/checkpoint.h5, step 2, weights CRC-32 [0-9a-f]*), this config's base is Checkpoint.init_from=$OTHER ($PWD/$OTHER/checkpoint.h5, step 2, weights CRC-32 [0-9a-f]*)" \
  run_np 2 train "${COMMON[@]}" "${LORA[@]}" -o Checkpoint.init_from=$OTHER -o Engine.output_dir=lora \
  -o Engine.max_steps=4 --resume auto
refused other_seed "LoRA base differs (seeded/checkpoints/step-00000002/checkpoint.h5): its adapters were trained on Global.seed=1234, this config's base is Global.seed=7" \
  run_np 2 train "${COMMON[@]}" "${LORA[@]}" -o Global.seed=7 -o Engine.output_dir=seeded -o Engine.max_steps=4 \
  --resume auto
run_np 2 train "${COMMON[@]}" "${LORA[@]}" -o Checkpoint.init_from=$PWD/$BASE -o Engine.output_dir=lora \
  -o Engine.max_steps=4 --resume auto > same_base.log 2>&1 || { tail same_base.log; fail "same base"; }
grep -q "resumed from lora/checkpoints/step-00000002" same_base.log || fail "the same base did not resume"
echo "ok: the LoRA run resumes on its own base (named by its absolute path)"
# A copy of the base elsewhere (another cluster, a node-local copy): the same weights, accepted.
cp -r $BASE copied_base
"$TRAINER" eval lora/checkpoints/step-00000002 --data data.h5 --batches 1 \
  -o Checkpoint.init_from=$PWD/copied_base > copy.out 2> copy.err ||
  { cat copy.err; fail "eval of the LoRA checkpoint on a copy of its base"; }
grep -q "holds the recorded one's weights .*: taken as a copy" copy.err ||
  { cat copy.err; fail "the copy of the base was not recognised as such"; }
echo "ok: a copy of the base in another folder is taken for it (the weights' CRC-32s match)"
# A sharded Hugging Face base: its shards' sizes are recorded, not the index's alone (which stays
# the same when a shard is rewritten).
"$TRAINER" export $BASE --output hf_sharded --max-shard-size 20KB > hf_sharded.log 2>&1 ||
  { cat hf_sharded.log; fail "export of the base in shards"; }
[ -e hf_sharded/model.safetensors.index.json ] || fail "the export is not sharded"
run_np 2 train "${COMMON[@]}" "${LORA[@]}" -o Checkpoint.init_from=hf_sharded -o Engine.output_dir=lora_hf \
  > lora_hf.log 2>&1 || { tail lora_hf.log; fail "LoRA run on a sharded Hugging Face base"; }
"$TRAINER" eval lora_hf/checkpoints --data data.h5 --batches 1 > /dev/null 2> lora_hf_eval.err ||
  { cat lora_hf_eval.err; fail "eval of the LoRA run on its sharded base"; }
# As an earlier trainer recorded it (the index's size alone): still accepted.
cp -r lora_hf lora_hf_earlier
earlier=lora_hf_earlier/checkpoints/step-00000002/checkpoint.h5
"$CHECKPOINT_CONFIG" $earlier --get lora_base | sed -E 's/, shards [0-9]+ bytes\)$/)/' > earlier.txt
grep -q "index.json, [0-9]* bytes)$" earlier.txt || { cat earlier.txt; fail "rewriting lora_base"; }
"$CHECKPOINT_CONFIG" $earlier --set-string lora_base < earlier.txt || fail "setting lora_base"
"$TRAINER" eval lora_hf_earlier/checkpoints --data data.h5 --batches 1 > /dev/null 2> earlier.err ||
  { cat earlier.err; fail "a sharded base recorded as an earlier trainer did"; }
printf '\0\0\0\0\0\0\0\0' >> hf_sharded/model-00001-of-0000*.safetensors
refused sharded_base "LoRA base differs.*trained on Checkpoint.init_from=hf_sharded ($PWD/hf_sharded/model.safetensors.index.json, [0-9]* bytes, shards [0-9]* bytes)" \
  "$TRAINER" eval lora_hf/checkpoints --data data.h5 --batches 1

# A relative init_from read from another folder, where the same relative path is another base.
mkdir -p elsewhere/base/checkpoints && cp -r $OTHER elsewhere/base/checkpoints/
TOP=$PWD
(cd elsewhere && refused eval_elsewhere "LoRA base differs.*trained on Checkpoint.init_from=$BASE ($TOP/$BASE/checkpoint.h5, .*this config's base is Checkpoint.init_from=$BASE ($TOP/elsewhere/$BASE/checkpoint.h5" \
  "$TRAINER" eval ../lora/checkpoints/step-00000002 --data ../data.h5 --batches 1)
"$TRAINER" eval lora/checkpoints/step-00000002 --data data.h5 --batches 1 > eval_here.out 2> eval_here.err ||
  { cat eval_here.err; fail "eval of the LoRA checkpoint where it was trained"; }
# A checkpoint folder as the base: its newest step at the time is the base; once the base run
# has moved on, resume and export refuse.
run_np 2 train "${COMMON[@]}" "${LORA[@]}" -o Checkpoint.init_from=base/checkpoints \
  -o Engine.output_dir=on_folder > on_folder.log 2>&1 || { tail on_folder.log; fail "LoRA on a folder"; }
"$TRAINER" inspect on_folder/checkpoints > on_folder.inspect 2>&1 || fail "inspect on_folder"
grep -q "LoRA adapters of Checkpoint.init_from=base/checkpoints ($PWD/$BASE/checkpoint.h5, step 2, " on_folder.inspect ||
  { cat on_folder.inspect; fail "the base is not recorded as the resolved step"; }
run_np 2 train "${COMMON[@]}" -o Engine.output_dir=base -o Engine.max_steps=4 --resume auto \
  > base_on.log 2>&1 || { tail base_on.log; fail "base run to step 4"; }
refused moved_base "LoRA base differs.*trained on Checkpoint.init_from=base/checkpoints ($PWD/$BASE/checkpoint.h5, step 2, .*this config's base is Checkpoint.init_from=base/checkpoints ($PWD/base/checkpoints/step-00000004/checkpoint.h5, step 4, " \
  run_np 2 train "${COMMON[@]}" "${LORA[@]}" -o Checkpoint.init_from=base/checkpoints -o Engine.output_dir=on_folder \
  -o Engine.max_steps=4 --resume auto
refused export_moved "LoRA base differs.*step-00000004" \
  "$TRAINER" export on_folder/checkpoints --lora merge --output merged
[ ! -e merged/model.safetensors ] || fail "export --lora merge wrote a merge onto the moved base"
run_np 2 train "${COMMON[@]}" "${LORA[@]}" -o Checkpoint.init_from=$BASE -o Engine.output_dir=on_folder \
  -o Engine.max_steps=4 --resume auto > on_step.log 2>&1 || { tail on_step.log; fail "resume on the step"; }
echo "ok: naming the recorded step as init_from resumes"

# Adapters where weights are wanted, and weights where adapters are.
refused lora_as_weights "lora/checkpoints/step-00000004/checkpoint.h5 holds LoRA adapters (of Checkpoint.init_from=$PWD/$BASE ($PWD/$BASE/checkpoint.h5, step 2, weights CRC-32 [0-9a-f]*)), not a model's weights.*trainer export --lora merge" \
  run_np 2 train "${COMMON[@]}" -o Engine.output_dir=lora -o Engine.max_steps=6 --resume auto
refused lora_as_init_from "lora/checkpoints/step-00000004/checkpoint.h5 holds LoRA adapters.*trainer export --lora merge" \
  run_np 2 train "${COMMON[@]}" -o Checkpoint.init_from=lora/checkpoints/step-00000004 -o Engine.output_dir=from_lora
# A LoRA checkpoint as a LoRA run's base: it must be weights (not "the config has no adapters").
refused lora_as_base "lora/checkpoints/step-00000004/checkpoint.h5 holds LoRA adapters .*, and a LoRA run's base (Checkpoint.init_from) must be weights.*trainer export --lora merge" \
  run_np 2 train "${COMMON[@]}" "${LORA[@]}" -o Checkpoint.init_from=lora/checkpoints/step-00000004 \
  -o Engine.output_dir=lora_on_lora
mkdir -p weights/checkpoints && cp -r $BASE weights/checkpoints/
refused weights_as_lora "weights/checkpoints/step-00000002/checkpoint.h5 holds a model's weights, not LoRA adapters.*Model.lora_rank=0" \
  run_np 2 train "${COMMON[@]}" "${LORA[@]}" -o Checkpoint.init_from=$BASE -o Engine.output_dir=weights \
  -o Engine.max_steps=4 --resume auto
# An adapter export needs no base weights: with the base gone, it is written all the same; a
# merge, which needs them, says the base is missing.
mv base base.away
"$TRAINER" export lora/checkpoints --lora adapter --output adapter_no_base > adapter.out 2> adapter.err ||
  { cat adapter.err; fail "export --lora adapter without the base"; }
[ -f adapter_no_base/adapter_config.json ] || fail "no adapter_config.json"
refused merge_no_base "names no weights" "$TRAINER" export lora/checkpoints --lora merge --output merged2
mv base.away base
# A checkpoint whose saved config no longer validates (3 heads of a 32-wide model, written into
# its /config by the test tool): inspect says so and exits 4, as eval refuses it (a usage error:
# -o overrides mend it); its tensors still verify.
mkdir -p badconfig/checkpoints && cp -r $BASE badconfig/checkpoints/
edited=badconfig/checkpoints/step-00000002/checkpoint.h5
"$CHECKPOINT_CONFIG" "$edited" | sed 's/^  num_heads: 2$/  num_heads: 3/' > badconfig.yaml
grep -q "^  num_heads: 3$" badconfig.yaml || fail "no num_heads line to edit in the saved config"
"$CHECKPOINT_CONFIG" "$edited" --set < badconfig.yaml || fail "writing the edited config"
refused inspect_bad_config "$edited was saved with a config that does not validate: .*Model.num_heads=3" \
  "$TRAINER" inspect badconfig/checkpoints
grep -q "^  config           NOT VALID: .*Model.num_heads=3" out.log &&
  grep -q "^  verifies         yes" out.log || { cat out.log; fail "inspect of a config that does not validate"; }
expect_error 2 "Model.num_heads=3 (badconfig/checkpoints/step-00000002/checkpoint.h5 (/config))" \
  "$TRAINER" eval badconfig/checkpoints --data data.h5
"$TRAINER" inspect $BASE > base.inspect 2>&1 && grep -q "^  config           valid$" base.inspect ||
  { cat base.inspect; fail "inspect of a valid checkpoint"; }
# A dense GPT-2 saved with a moe_* key, rope_theta and a RoPE scaling setting (earlier trainers
# took and ignored them; training now refuses them): eval and inspect read them as their
# defaults, as the saving run did in effect.
mkdir -p densemoe/checkpoints && cp -r $BASE densemoe/checkpoints/
edited=densemoe/checkpoints/step-00000002/checkpoint.h5
"$CHECKPOINT_CONFIG" "$edited" | sed -e 's/^  moe_aux_loss_coeff: 0.0$/  moe_aux_loss_coeff: 0.01/' \
  -e 's/^  rope_theta: 1.0e+04$/  rope_theta: 5.0e+05/' -e 's/^  rope_factor: 8.0$/  rope_factor: 16.0/' \
  > densemoe.yaml
for line in "moe_aux_loss_coeff: 0.01" "rope_theta: 5.0e+05" "rope_factor: 16.0"; do
  grep -q "^  $line$" densemoe.yaml || fail "no line to edit into '$line'"
done
"$CHECKPOINT_CONFIG" "$edited" --set < densemoe.yaml || fail "writing the edited config"
"$TRAINER" inspect densemoe/checkpoints > densemoe.inspect 2>&1 &&
  grep -q "^  config           valid$" densemoe.inspect ||
  { cat densemoe.inspect; fail "inspect of a dense model saved with ignored keys"; }
"$TRAINER" eval densemoe/checkpoints --data data.h5 > densemoe.eval 2>&1 ||
  { cat densemoe.eval; fail "eval of a dense model saved with ignored keys"; }
echo PASS
