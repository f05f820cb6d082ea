#!/usr/bin/env bash
# Hugging Face mixture-of-experts models in and out, against transformers itself: 4.46.3 from
# hf_venv.sh (skipped, exit 77, without it), or the python named by TRAINER_HF_PYTHON (the H200
# machine's transformers 5, which also has Qwen3-MoE). hf_moe.py makes tiny random models with
# transformers: a Qwen2MoeForCausalLM (layer 0 dense, shared expert, q/k/v biases, 20 KB shards
# with an index), a MixtralForCausalLM (every layer sparse, router_jitter_noise, warned about),
# an OlmoeForCausalLM (q/k norms over all heads together: Model.qk_norm_type=full; trained on
# dp2, as TP would split those heads) and a Qwen3MoeForCausalLM (per-head q/k norm; under
# transformers 4.46, which lacks the class, written by hand with stacked experts and checked by
# the float64 reference only). Each goes through hf_lib.sh's round trip: `trainer inspect`, a
# run from it at learning rate 0 whose `trainer eval` loss must be transformers' and hf_moe.py's
# float64 reference's (1e-5 relative), 4 training steps on tp2 (OLMoE: dp2), `trainer export`,
# and transformers' loss of the export must be trainer eval's of the trained checkpoint. Refusals, one line each: a missing, a duplicated and a ninth
# expert, a sigmoid scoring_func, sparse layers the trainer's keys cannot express, OLMoE with
# grouped-query attention or on tp2, router keys that differ from the pretrained model's, and the
# export of a MoE model no class computes.
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/hf_lib.sh"
hf_setup "$SRC/tests/integration/hf_moe.py"
overrides() { sed -n 's/^  init_from needs  //p' "inspect-$1.txt"; }

hf_round_trip qwen2_moe 40 2 --max-shard-size 20KB
hf_round_trip mixtral 40 2
hf_round_trip olmoe 40 1  # its q/k norm spans the heads that TP would split
if "$PY" "$HELPER" has qwen3_moe; then
  hf_round_trip qwen3_moe 40 2
else
  echo "qwen3_moe: this transformers has no such class; its loss is the float64 reference's" \
    "only (TRAINER_HF_PYTHON=<python with transformers 5> checks it against transformers)"
  hf_round_trip qwen3_moe 40 2 -- --reference-only
fi
grep -q "^  experts          8 experts, top-2, expert FFN 32, shared expert FFN 48, dropless; MoE layers 1,2 of 3" \
  inspect-qwen2_moe.txt || { cat inspect-qwen2_moe.txt; fail "inspect: no MoE shape"; }
# Said once (rank 0), though both ranks read the folder's config.json more than once.
[[ $(grep -c "warning: MixtralForCausalLM has router_jitter_noise 0.01" init-mixtral.log) -eq 1 ]] ||
  fail "mixtral: not one warning about router_jitter_noise"
python3 - <<'PY'
import json, os
for case, arch in (("qwen2_moe", "Qwen2MoeForCausalLM"), ("mixtral", "MixtralForCausalLM"),
                   ("olmoe", "OlmoeForCausalLM"), ("qwen3_moe", "Qwen3MoeForCausalLM")):
    c = json.load(open(f"export-{case}/config.json"))
    assert c["architectures"] == [arch] and c["num_experts_per_tok"] == 2, (case, c)
    if case in ("qwen2_moe", "qwen3_moe"):
        assert c["mlp_only_layers"] == [0] and c["decoder_sparse_step"] == 1, c
        assert c["norm_topk_prob"] == (case == "qwen3_moe"), c
index = json.load(open("export-qwen2_moe/model.safetensors.index.json"))["weight_map"]
assert "model.layers.2.mlp.experts.7.down_proj.weight" in index, sorted(index)[:10]
assert not any("gate_up_proj" in k for k in index)
print(f"exports: config.json of each class; Qwen2-MoE in {len(set(index.values()))} shards")
PY

# A router aux loss that transformers would train with: taken as Model.moe_aux_loss_coeff, with a
# warning that the two losses weigh the balance differently.
rm -rf aux && cp -r hf-qwen2_moe aux
python3 -c 'import json; c = json.load(open("aux/config.json")); c.update(output_router_logits=True, router_aux_loss_coef=0.1); json.dump(c, open("aux/config.json", "w"))'
"$TRAINER" inspect aux > inspect-aux.txt 2> inspect-aux.err || { cat inspect-aux.*; fail "inspect aux"; }
grep -q -- "-o Model.moe_aux_loss_coeff=0.1" inspect-aux.txt || { cat inspect-aux.txt; fail "aux: no coefficient"; }
grep -q "warning: aux/config.json: output_router_logits true with router_aux_loss_coef 0.1, taken as Model.moe_aux_loss_coeff: this trainer's load-balancing loss is Megatron's" \
  inspect-aux.err || { cat inspect-aux.err; fail "aux: no warning about the two losses"; }

# Bad input: one line each, naming what is wrong.
read -ra MODEL <<< "$(overrides qwen2_moe)"
bad() {  # text folder [overrides...]
  local text=$1 dir=$2
  shift 2
  expect_error 4 "$text" run_np 1 train "${COMMON[@]}" "${MODEL[@]}" "$@" \
    -o Checkpoint.init_from="$dir" -o Engine.output_dir="bad-$dir"
}
"$PY" "$HELPER" edit hf-olmoe gqa || fail "editing gqa"
bad "num_key_value_heads 2 is not supported with OlmoeForCausalLM's q/k norm over all heads" \
  hf-olmoe-gqa
read -ra OLMOE <<< "$(overrides olmoe)"
expect_error 2 "Model.qk_norm_type=\"full\" normalises q and k over every head, and Distributed.tp_degree=2" \
  run_np 2 train "${COMMON[@]}" "${OLMOE[@]}" -o Distributed.tp_degree=2 -o Engine.output_dir=bad-tp
for what in missing duplicated extra sigmoid sparse_step; do
  "$PY" "$HELPER" edit hf-qwen2_moe "$what" || fail "editing $what"
done
bad "lacks expert 3 of layer 1: no model.layers.1.mlp.experts.3.up_proj.weight" hf-qwen2_moe-missing
bad "holds expert 0 of layer 2 twice: model.layers.2.mlp.experts.0.gate_proj.weight and model.layers.2.mlp.experts.gate_up_proj\\[0\\]" \
  hf-qwen2_moe-duplicated
bad "holds model.layers.1.mlp.experts.8.up_proj.weight \\[32, 64\\], which the Qwen2MoeForCausalLM" \
  hf-qwen2_moe-extra
bad "scoring_func sigmoid is not supported" hf-qwen2_moe-sigmoid
bad "the MoE layers 1,3 (decoder_sparse_step 2, mlp_only_layers) are not the first dense layers" \
  hf-qwen2_moe-sparse_step -o Model.num_layers=4
bad "Model.moe_norm_topk_prob is true, the pretrained model's false" hf-qwen2_moe \
  -o Model.moe_norm_topk_prob=true
bad "Model.moe_first_k_dense=0 and Model.moe_layer_freq=1 make layers 0,1,2 MoE layers, the pretrained model has 1,2" \
  hf-qwen2_moe -o Model.moe_first_k_dense=0
# Mixtral's own names and keys in its refusals.
read -ra MODEL <<< "$(overrides mixtral)"
for what in no_router topk_over; do
  "$PY" "$HELPER" edit hf-mixtral "$what" || fail "editing $what"
done
bad "lacks model.layers.1.block_sparse_moe.gate.weight, which its MixtralForCausalLM has: copy the whole model folder" \
  hf-mixtral-no_router
bad "num_experts_per_tok 9 with 8 experts (num_local_experts): give a number of experts per token from 1 to 8" \
  hf-mixtral-topk_over
# A config.json cut short, and one naming no architecture.
mkdir -p cfg-cut cfg-noarch
ln -sf "$PWD/hf-mixtral/model.safetensors" cfg-cut/ && ln -sf "$PWD/hf-mixtral/model.safetensors" cfg-noarch/
head -c 40 hf-mixtral/config.json > cfg-cut/config.json
python3 -c "
import json
c = json.load(open('hf-mixtral/config.json'))
c.pop('architectures'); c.pop('model_type')
json.dump(c, open('cfg-noarch/config.json', 'w'))"
bad "cfg-cut/config.json is not JSON: .*Copy the model's config.json into the folder again" cfg-cut
bad "cfg-noarch/config.json names no architecture (neither architectures nor model_type)" cfg-noarch
run_np 1 train "${COMMON[@]}" -o Model.num_experts=4 -o Model.moe_router_score_function=sigmoid \
  -o Engine.max_steps=1 -o Engine.save_steps=1 -o Engine.output_dir=sigmoid > sigmoid.log 2>&1 ||
  { tail -20 sigmoid.log; fail "training a sigmoid-routed model"; }
expect_error 2 "has a sigmoid router: Qwen2-MoE, Mixtral, OLMoE and Qwen3-MoE route by a softmax" \
  "$TRAINER" export sigmoid/checkpoints --output export-sigmoid
# A Mixtral-shaped model (no shared expert, no q/k norm, renormalised top K) with llama3 RoPE
# scaling: Mixtral in transformers before 4.48 ignores rope_scaling, so export refuses it.
run_np 1 train "${COMMON[@]}" -o Model.num_experts=4 -o Model.moe_norm_topk_prob=true -o Model.qk_norm=false \
  -o Model.rope_scaling=llama3 -o Engine.max_steps=1 -o Engine.save_steps=1 \
  -o Engine.output_dir=mixtral-rope > mixtral-rope.log 2>&1 ||
  { tail -20 mixtral-rope.log; fail "training a Mixtral-shaped model with llama3 RoPE"; }
expect_error 2 "scales its RoPE (Model.rope_scaling=llama3): Mixtral in transformers before 4.48" \
  "$TRAINER" export mixtral-rope/checkpoints --output export-mixtral-rope
# transformers' own defaults where a config.json leaves rms_norm_eps and rope_theta out: Mixtral's
# are 1e-5 and 1e6 (not Llama's 1e-6 and 1e4).
mkdir -p mixtral-defaults && ln -sf "$PWD/hf-mixtral/model.safetensors" mixtral-defaults/
python3 -c "
import json
c = json.load(open('hf-mixtral/config.json'))
for k in ('rms_norm_eps', 'rope_theta', 'rope_scaling', 'rope_parameters'): c.pop(k, None)
json.dump(c, open('mixtral-defaults/config.json', 'w'))"
"$TRAINER" inspect mixtral-defaults > mixtral-defaults.txt 2>&1 || true
grep -q "Model.norm_eps=1e-05 .*Model.rope_theta=1000000" mixtral-defaults.txt ||
  { cat mixtral-defaults.txt; fail "Mixtral's default rms_norm_eps and rope_theta"; }
# A Mixtral whose sliding_window covers max_position_embeddings but not the Model.max_seq_len
# trained here (a RoPE model's max_seq_len is not compared): refused naming both. With llama3
# rope_scaling a warning says which transformers computes that model. A Qwen2-MoE whose sparse
# step leaves no MoE layer names the dense class to import it as.
mkdir -p mixtral-window mixtral-scaled qwen2_moe-dense
for d in mixtral-window mixtral-scaled; do ln -sf "$PWD/hf-mixtral/model.safetensors" $d/; done
for f in hf-qwen2_moe/*.safetensors*; do ln -sf "$PWD/$f" qwen2_moe-dense/; done  # sharded
window=$(python3 -c "
import json
c = json.load(open('hf-mixtral/config.json'))
c['sliding_window'] = c['max_position_embeddings']
json.dump(c, open('mixtral-window/config.json', 'w'))
c['sliding_window'] = None
c['rope_scaling'] = {'rope_type': 'llama3', 'factor': 8.0, 'low_freq_factor': 1.0,
                     'high_freq_factor': 4.0, 'original_max_position_embeddings': 16}
json.dump(c, open('mixtral-scaled/config.json', 'w'))
q = json.load(open('hf-qwen2_moe/config.json'))
q['decoder_sparse_step'] = q['num_hidden_layers'] + 1
q['mlp_only_layers'] = []
json.dump(q, open('qwen2_moe-dense/config.json', 'w'))
print(c['max_position_embeddings'])")
bad "mixtral-window/config.json: sliding_window $window is shorter than Model.max_seq_len $((2 * window)): transformers attends to the last $window tokens only" \
  mixtral-window -o Model.max_seq_len=$((2 * window))
"$TRAINER" inspect mixtral-scaled > mixtral-scaled.txt 2>&1 || true
grep -q "warning: .*a MixtralForCausalLM with rope_scaling llama3.* transformers before 4.48 ignores rope_scaling" \
  mixtral-scaled.txt || { cat mixtral-scaled.txt; fail "no warning on Mixtral's rope_scaling"; }
expect_error 4 "leave no MoE layer of .*: a dense model. Import it as the dense class of its family (in config.json, architectures \[\"Qwen2ForCausalLM\"\]" \
  "$TRAINER" inspect qwen2_moe-dense
# A config.json of 5000 layers, the first ones dense: inspect finds the MoE keys at once (its
# search over every (layer_freq, first_k_dense) pair took minutes); a billion is refused.
mkdir -p qwen2_moe-deep qwen2_moe-huge
python3 -c "
import json
q = json.load(open('hf-qwen2_moe/config.json'))
q['num_hidden_layers'], q['mlp_only_layers'], q['decoder_sparse_step'] = 5000, [0, 1, 2], 1
json.dump(q, open('qwen2_moe-deep/config.json', 'w'))
q['num_hidden_layers'] = 10 ** 9
json.dump(q, open('qwen2_moe-huge/config.json', 'w'))"
for f in hf-qwen2_moe/*.safetensors*; do ln -sf "$PWD/$f" qwen2_moe-deep/; ln -sf "$PWD/$f" qwen2_moe-huge/; done
timeout 20 "$TRAINER" inspect qwen2_moe-deep > deep.txt 2>&1 || true
grep -q "Model.num_layers=5000 .*-o Model.moe_layer_freq=1 -o Model.moe_first_k_dense=3 " deep.txt ||
  { tail -5 deep.txt; fail "inspect of 5000 layers"; }
expect_error 4 "num_hidden_layers 1000000000 is not in \[1, 10000\]" "$TRAINER" inspect qwen2_moe-huge
echo "PASS: Hugging Face MoE import and export"
