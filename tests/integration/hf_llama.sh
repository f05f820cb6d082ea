#!/usr/bin/env bash
# Hugging Face llama-family weights in and out, against transformers 4.46.3 itself (hf_venv.sh;
# skipped, exit 77, without it). hf_llama.py makes tiny random models: a LlamaForCausalLM (GQA,
# llama3 rope_scaling, untied, saved in 20 KB shards with an index), a Qwen2ForCausalLM (q/k/v
# biases, tied) and a Qwen3ForCausalLM (q/k norm, head_dim != hidden/heads, transformers 5's
# config form; transformers 4.46 has no Qwen3, so its loss comes from the float64 reference the
# helper writes, which the two others check against transformers too). For each: `trainer
# inspect` gives the -o Model.* overrides; a run with those, Checkpoint.init_from and learning
# rate 0 saves the initial weights, whose `trainer eval` loss on two samples of the packed text
# must be transformers' (1e-5 relative); then 4 training steps, `trainer export` (the llama in
# 20KB shards), and transformers' loss from the export must be trainer eval's of the trained
# checkpoint. Bad input: one line, exit 4 (or 2 for a usage error).
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/hf_lib.sh"
hf_setup "$SRC/tests/integration/hf_llama.py"
hf_round_trip llama 20 2 --max-shard-size 20KB
hf_round_trip qwen2 20 2
hf_round_trip qwen3 20 2 -- --reference-only
python3 - <<'PY'
import json, os
for case, arch, tied in (("llama", "LlamaForCausalLM", False), ("qwen2", "Qwen2ForCausalLM", True),
                         ("qwen3", "Qwen3ForCausalLM", False)):
    c = json.load(open(f"export-{case}/config.json"))
    assert c["architectures"] == [arch] and c["tie_word_embeddings"] == tied, (case, c)
    assert c["torch_dtype"] == "float32" and c["eos_token_id"] == 256, c
index = json.load(open("export-llama/model.safetensors.index.json"))
shards = sorted(set(index["weight_map"].values()))
assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors", shards
assert not os.path.exists("export-llama/model.safetensors")
assert "lm_head.weight" in index["weight_map"] and len(index["weight_map"]) == 2 + 2 * 9 + 1
c = json.load(open("export-llama/config.json"))
assert c["rope_scaling"]["rope_type"] == "llama3" and c["rope_theta"] == 500000.0, c
print(f"exports: config.json of each architecture; the llama in {len(shards)} shards")
PY

# Bad input: one line each, naming what is wrong.
bad() {  # code text folder [overrides...]
  local code=$1 text=$2 dir=$3
  shift 3
  expect_error "$code" "$text" run_np 1 train "${COMMON[@]}" "${MODEL_QWEN2[@]}" "$@" \
    -o Checkpoint.init_from="$dir" -o Engine.output_dir="bad-$dir"
}
read -ra MODEL_QWEN2 <<< "$(sed -n 's/^  init_from needs  //p' inspect-qwen2.txt)"
edit() {  # folder python-expression-on-c
  rm -rf "$1" && cp -r hf-qwen2 "$1"
  python3 -c "import json; c = json.load(open('$1/config.json')); $2; json.dump(c, open('$1/config.json', 'w'))"
}
bad 4 "Model.head_dim is 16, the pretrained model's 24. The pretrained model needs -o Model.arch=llama" \
  hf-qwen3
read -ra MODEL_QWEN3 <<< "$(sed -n 's/^  init_from needs  //p' inspect-qwen3.txt)"
expect_error 4 "Model.rope_theta is 10000, the pretrained model's 20000" run_np 1 train \
  "${COMMON[@]}" "${MODEL_QWEN3[@]}" -o Model.rope_theta=10000 -o Checkpoint.init_from=hf-qwen3 \
  -o Engine.output_dir=bad-theta
expect_error 4 "hf-qwen2/model.safetensors (Checkpoint.init_from) is a Qwen2ForCausalLM, the config's Model.arch is gpt2. The pretrained model needs -o Model.arch=llama" \
  run_np 1 train -c "$SRC/configs/tiny-cpu.yaml" -o Data.train_path=text.h5 \
  -o Checkpoint.init_from=hf-qwen2 -o Engine.output_dir=bad-gpt2
bad 4 "Model.num_kv_heads is 4, the pretrained model's 2" hf-qwen2 -o Model.num_kv_heads=4
# Checked before the data: a vocabulary below the data's names the pretrained model's overrides,
# not only the data's vocabulary.
bad 4 "Model.vocab_size is 100, the pretrained model's 257.* The pretrained model needs -o Model.arch=llama" \
  hf-qwen2 -o Model.vocab_size=100
edit heads 'c["num_key_value_heads"] = 3'
bad 4 "num_attention_heads 4 is not a multiple of num_key_value_heads 3" heads
edit arch 'c["architectures"] = ["MistralForCausalLM"]'
bad 4 "architecture MistralForCausalLM is not supported (LlamaForCausalLM, Qwen2ForCausalLM" arch
edit rope 'c["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}'
bad 4 "rope type yarn is not supported (default and llama3 are)" rope
# Keys that transformers 4 and 5 (or this trainer and transformers) read differently: refused
# where they would compute another model.
edit mtype 'c["model_type"] = "mistral"'
bad 4 'architectures \["Qwen2ForCausalLM"\] and model_type mistral name different models' mtype
edit rtype 'c["rope_scaling"] = {"type": "linear", "rope_type": "default", "factor": 4.0}'
bad 4 "rope_scaling's type linear and rope_type default differ" rtype
edit rtheta 'c["rope_scaling"] = {"rope_type": "default", "rope_theta": 12345.0}'
bad 4 "rope_scaling holds rope_theta 12345 and the top level" rtheta
edit partial 'c["partial_rotary_factor"] = 0.5'
bad 4 "partial_rotary_factor 0.5 is not supported" partial
# Dropout that transformers would train with: said, the run goes on.
edit drop 'c["attention_dropout"] = 0.5'
run_np 1 train "${COMMON[@]}" "${MODEL_QWEN2[@]}" -o Checkpoint.init_from=drop -o Engine.max_steps=1 \
  -o Engine.output_dir=drop-run > drop.log 2>&1 || { tail drop.log; fail "init_from drop"; }
[[ $(grep -c "warning: drop/config.json has attention_dropout 0.5, with which transformers would train it" drop.log) -eq 1 ]] ||
  { cat drop.log; fail "not one warning about attention_dropout"; }
edit mlp 'c["mlp_bias"] = True'
bad 4 "mlp_bias true is not supported" mlp
edit dtype 'c["torch_dtype"] = "float8_e4m3fn"'
bad 4 "dtype float8_e4m3fn is not supported" dtype
edit missing 'c["num_hidden_layers"] = 3'
bad 4 "lacks model.layers.2.self_attn.q_proj.weight, which its Qwen2ForCausalLM has" missing -o Model.num_layers=3
edit extra 'c["num_hidden_layers"] = 1'
bad 4 "holds model.layers.1.input_layernorm.weight \\[64\\], which the Qwen2ForCausalLM" extra \
  -o Model.num_layers=1
edit shape 'c["intermediate_size"] = 80'
bad 4 "model.layers.0.mlp.gate_proj.weight is \\[96, 64\\], the model of its config.json needs \\[80, 64\\]" \
  shape -o Model.ffn_hidden_size=80
"$PY" - <<'PY'
from safetensors.torch import load_file, save_file
import shutil
shutil.copytree("hf-qwen2", "f64")
w = load_file("f64/model.safetensors")
w["model.norm.weight"] = w["model.norm.weight"].double()
save_file(w, "f64/model.safetensors", metadata={"format": "pt"})
PY
bad 4 "model.norm.weight has dtype F64 (F32, BF16 or F16 only)" f64
expect_error 2 "max-shard-size 5XB: give bytes" "$TRAINER" export trained-llama/checkpoints --output x \
  --max-shard-size 5XB
expect_error 2 "export-llama/model.safetensors.index.json exists" "$TRAINER" export \
  trained-llama/checkpoints --output export-llama
# A Qwen2-shaped model (q/k/v biases) with head_dim 24 on hidden 64 and 4 heads: transformers 4's
# Qwen2 derives head_dim from hidden_size and could not load the export, so it is refused.
run_np 1 train "${COMMON[@]}" "${MODEL_QWEN2[@]}" -o Model.head_dim=24 -o Engine.max_steps=1 \
  -o Engine.save_steps=1 -o Engine.output_dir=qwen2-hd > qwen2-hd.log 2>&1 ||
  { tail -20 qwen2-hd.log; fail "training a Qwen2-shaped model with head_dim 24"; }
expect_error 2 "Qwen2 model (Model.qkv_bias) has head_dim 24, not hidden_size / num_heads" \
  "$TRAINER" export qwen2-hd/checkpoints --output export-qwen2-hd
echo "PASS: Hugging Face llama-family import and export"
