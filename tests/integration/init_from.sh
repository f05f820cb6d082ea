#!/usr/bin/env bash
# Checkpoint.init_from: a fresh run starts from pretrained weights. A model trained with TP=2 on 2
# CPU ranks is exported as Hugging Face GPT-2 (trainer export, checked against an independent
# forward by export.sh); runs with learning rate 0 (one step leaves the weights as they start)
# then start from that export on DP=2, from the trainer checkpoint itself on PP=2, from the export
# renamed the way transformers' hub files are (no "transformer." prefix, the causal-mask buffers,
# lm_head) on one rank, and from the bf16 export; the weights they save must be exactly the
# trained model's (the bf16 export's values for the last). A resume takes its own checkpoint, not
# init_from, and `trainer inspect` of a Hugging Face folder or file names the Model keys to set.
# Model.bias=false exports zero biases and takes them back.
# Bad input stops every rank with one line and exit code 4: no weights at the path, a
# hidden size (of a Hugging Face file or of a trainer checkpoint), a layer count that does not fit;
# for a llama-family folder, one shard named, a shard missing, no config.json, a tied config.json
# beside a separate lm_head (and hidden_act swish is SiLU).
source "$(dirname "$0")/lib.sh"
make_small_dataset data.h5
COMMON=(-c "$SRC/configs/tiny-cpu.yaml" -o Data.train_path=data.h5 -o Data.val_fraction=0
        -o Model.num_layers=2 -o Model.hidden_size=32 -o Model.num_heads=2 -o Model.max_seq_len=16
        -o Global.micro_batch_size=2 -o Global.global_batch_size=4 -o Engine.eval_freq=0
        -o Engine.logging_freq=1)
run_np 2 train "${COMMON[@]}" -o Distributed.tp_degree=2 -o Engine.max_steps=20 \
  -o Engine.save_steps=20 -o Engine.output_dir=trained > trained.log 2>&1 ||
  { tail -20 trained.log; fail "training run failed"; }
export_to() {  # checkpoints folder, output
  "$TRAINER" export "$@" > /dev/null || fail "trainer export $*"
}
export_to trained/checkpoints --output hf
export_to trained/checkpoints --output hf-bf16 --dtype bf16
python3 - <<'PY'
# The export as transformers' hub files name it: no "transformer." prefix, the attention's causal
# mask buffers and lm_head written too.
import json, os, struct
data = open("hf/model.safetensors", "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header, body = json.loads(data[8:8 + n]), data[8 + n:]
header.pop("__metadata__")
tensors = {}
for name, h in header.items():
    a, b = h["data_offsets"]
    tensors[name.replace("transformer.", "", 1)] = (h["shape"], body[a:b])
mask = struct.pack("<256f", *[1.0 if j <= i else 0.0 for i in range(16) for j in range(16)])
for layer in range(2):
    tensors[f"h.{layer}.attn.bias"] = ([1, 1, 16, 16], mask)
tensors["lm_head.weight"] = tensors["wte.weight"]
out, offset, head = b"", 0, {}
for name, (shape, raw) in tensors.items():
    head[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(raw)]}
    out, offset = out + raw, offset + len(raw)
text = json.dumps(head).encode()
text += b" " * (-len(text) % 8)
os.makedirs("hub", exist_ok=True)
open("hub/model.safetensors", "wb").write(struct.pack("<Q", len(text)) + text + out)
PY

# trainer inspect tells the Model keys init_from needs (num_heads from config.json, where there is one).
"$TRAINER" inspect hf > inspect-hf.txt || { cat inspect-hf.txt; fail "trainer inspect hf"; }
grep -qx "  init_from needs  -o Model.vocab_size=257 -o Model.hidden_size=32 -o Model.num_layers=2 -o Model.max_seq_len=16 -o Model.ffn_hidden_size=0 -o Model.num_heads=2" inspect-hf.txt ||
  { cat inspect-hf.txt; fail "trainer inspect hf: not the Model keys of the trained model"; }
"$TRAINER" inspect hub/model.safetensors > inspect-hub.txt || fail "trainer inspect hub"
grep -q "init_from needs  -o Model.vocab_size=257 .*-o Model.num_layers=2" inspect-hub.txt &&
  grep -q "no n_head in hub/config.json" inspect-hub.txt ||
  { cat inspect-hub.txt; fail "trainer inspect hub/model.safetensors"; }

frozen() {  # name ranks overrides...: one step at learning rate 0, saved, then exported
  local name=$1 np=$2
  shift 2
  run_np "$np" train "${COMMON[@]}" -o Optimizer.lr=0 -o Optimizer.min_lr=0 -o Engine.max_steps=1 \
    -o Engine.save_steps=1 -o Engine.output_dir="$name" "$@" > "$name.log" 2>&1 ||
    { tail -20 "$name.log"; fail "$name failed"; }
  grep -q "initial weights from" "$name.log" || fail "$name did not say where its weights came from"
  export_to "$name/checkpoints" --output "hf-$name"
}
frozen from-hf 2 -o Checkpoint.init_from=hf
frozen from-checkpoint 2 -o Distributed.pp_degree=2 -o Checkpoint.init_from=trained/checkpoints
frozen from-hub 1 -o Checkpoint.init_from=hub/model.safetensors
frozen from-bf16 1 -o Checkpoint.init_from=hf-bf16
# The export's config.json holds the run's dropout (0): nothing is said about it.
! grep -q "with which transformers would train it" from-hf.log || fail "from-hf: a dropout warning"
# A safetensors file's tensors by name (raw bytes), for the comparisons below.
cat > safetensors_tensors.py <<'PY'
import json, struct
def tensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__")
    return {k: data[8 + n + h["data_offsets"][0]:8 + n + h["data_offsets"][1]] for k, h in header.items()}
PY
python3 - <<'PY'
from safetensors_tensors import tensors
def f32_of_bf16(raw):
    return b"".join(b"\0\0" + raw[i:i + 2] for i in range(0, len(raw), 2))
want = tensors("hf/model.safetensors")
for run in ("from-hf", "from-checkpoint", "from-hub"):
    got = tensors(f"hf-{run}/model.safetensors")
    assert got.keys() == want.keys() and all(got[k] == want[k] for k in want), run
want16 = {k: f32_of_bf16(v) for k, v in tensors("hf-bf16/model.safetensors").items()}
got = tensors("hf-from-bf16/model.safetensors")
assert got.keys() == want16.keys() and all(got[k] == want16[k] for k in want16), "from-bf16"
print(f"{len(want)} tensors: the weights of every run started from init_from are the trained ones")
PY

# A resume takes its own checkpoint (step 1), not init_from's weights.
run_np 2 train "${COMMON[@]}" -o Optimizer.lr=0 -o Optimizer.min_lr=0 -o Engine.max_steps=2 \
  -o Engine.output_dir=from-hf -o Checkpoint.init_from=nowhere --resume auto > resumed.log 2>&1 ||
  { tail -20 resumed.log; fail "the resume with init_from set failed"; }
grep -q "resumed from" resumed.log || fail "the run did not resume"
! grep -q "initial weights from" resumed.log || fail "a resume took init_from's weights"

# A Hugging Face folder where a trainer checkpoint belongs, and one of pytorch_model.bin alone:
# the fix named (import it with init_from; save it as safetensors).
expect_error 4 "hf is a Hugging Face model folder: start a run from it with -o Checkpoint.init_from=hf" \
  "$TRAINER" eval hf --data data.h5
mkdir -p binonly && cp hf/config.json binonly/ && touch binonly/pytorch_model.bin
expect_error 4 "binonly holds pytorch_model.bin, which the trainer does not read: save the model as safetensors" \
  run_np 1 train "${COMMON[@]}" -o Engine.output_dir=bad0 -o Checkpoint.init_from=binonly
expect_error 4 "init_from=nowhere names no weights (it does not exist)" run_np 2 train "${COMMON[@]}" -o Engine.output_dir=bad1 \
  -o Checkpoint.init_from=nowhere
expect_error 4 "Model.hidden_size" run_np 2 train "${COMMON[@]}" -o Engine.output_dir=bad2 \
  -o Model.hidden_size=64 -o Checkpoint.init_from=hf
expect_error 4 "does not match the model in the config" run_np 2 train "${COMMON[@]}" \
  -o Engine.output_dir=bad5 -o Model.hidden_size=64 -o Checkpoint.init_from=trained/checkpoints
expect_error 4 "has no place for" run_np 1 train "${COMMON[@]}" -o Engine.output_dir=bad3 \
  -o Model.num_layers=1 -o Checkpoint.init_from=hub
expect_error 4 "lacks transformer.h.2" run_np 1 train "${COMMON[@]}" -o Engine.output_dir=bad4 \
  -o Model.num_layers=3 -o Checkpoint.init_from=hf

# Model.bias=false: the export holds zero biases (transformers' GPT-2 has them), which init_from
# takes back into a model without biases, giving the same weights; a file with non-zero biases is
# refused.
run_np 1 train "${COMMON[@]}" -o Model.bias=false -o Engine.max_steps=5 -o Engine.save_steps=5 \
  -o Engine.output_dir=nobias > nobias.log 2>&1 || { tail -20 nobias.log; fail "the run without biases"; }
export_to nobias/checkpoints --output hf-nobias
frozen from-nobias 1 -o Model.bias=false -o Checkpoint.init_from=hf-nobias
python3 - <<'PY'
from safetensors_tensors import tensors
want, got = tensors("hf-nobias/model.safetensors"), tensors("hf-from-nobias/model.safetensors")
assert got.keys() == want.keys() and all(got[k] == want[k] for k in want), "from-nobias"
biases = [k for k in want if k.endswith(".bias")]
assert len(biases) == 2 * 6 + 1 and all(not any(want[k]) for k in biases), biases
print(f"no biases: {len(want)} tensors exported, {len(biases)} of them zero biases, taken back")
PY
expect_error 4 "non-zero values" run_np 1 train "${COMMON[@]}" -o Engine.output_dir=bad6 \
  -o Model.bias=false -o Checkpoint.init_from=hf
# A GPT-2 config.json with a setting this trainer's GPT-2 does not compute: refused, naming it
# (import and inspect alike), not imported as another model.
edited_config() {  # source copy key json-value: a copy of a model folder, config.json's key changed
  rm -rf "$2" && cp -r "$1" "$2"
  python3 -c 'import json, sys
path = sys.argv[1] + "/config.json"
c = json.load(open(path))
c[sys.argv[2]] = json.loads(sys.argv[3])
json.dump(c, open(path, "w"), indent=2)' "${@:2}"
}
# n_head, which the weights' shapes do not show: the same weights in 4 heads are another model.
edited_config hf gpt2-heads n_head 4
expect_error 4 "gpt2-heads/config.json: n_head 4, the config's Model.num_heads 2: .*Set -o Model.num_heads=4" \
  run_np 1 train "${COMMON[@]}" -o Engine.output_dir=bad-heads -o Checkpoint.init_from=gpt2-heads
# A dropout that transformers would train with (GPT2Config's 0.1 where a key is absent): said,
# and the run goes on with the Model keys'.
edited_config hf gpt2-drop attn_pdrop 0.1
python3 -c 'import json; c = json.load(open("gpt2-drop/config.json")); del c["embd_pdrop"]; json.dump(c, open("gpt2-drop/config.json", "w"))'
run_np 1 train "${COMMON[@]}" -o Engine.output_dir=drop -o Checkpoint.init_from=gpt2-drop \
  -o Engine.max_steps=1 > drop.log 2>&1 || { tail drop.log; fail "init_from gpt2-drop"; }
grep -q "warning: gpt2-drop/config.json has attn_pdrop 0.1, resid_pdrop 0, embd_pdrop 0.1, with which transformers would train it; this run trains with Model.attention_dropout 0 and Model.hidden_dropout 0" drop.log ||
  { cat drop.log; fail "no warning about the folder's dropout"; }
for setting in tie_word_embeddings=false scale_attn_weights=false \
               scale_attn_by_inverse_layer_idx=true 'activation_function="relu"' \
               layer_norm_epsilon=0.01; do
  key=${setting%%=*}
  edited_config hf "gpt2-$key" "$key" "${setting#*=}"
  expect_error 4 "gpt2-$key/config.json: .*${key}.* is not supported: this trainer's GPT-2 would compute another model" \
    run_np 1 train "${COMMON[@]}" -o Engine.output_dir="bad-$key" -o Checkpoint.init_from="gpt2-$key"
  expect_error 4 "gpt2-$key/config.json: .*is not supported" "$TRAINER" inspect "gpt2-$key"
done

# A llama-family model (exported in shards) and what can be wrong around one, each refused in one
# line (exit 4): one shard named as the model, a shard missing from the folder, the weights
# without their config.json, a config.json that ties the embeddings beside a separate lm_head.
# hidden_act "swish" (transformers' name for SiLU) is read as silu: the same weights come in.
LLAMA=(-c "$SRC/configs/tiny-llama-cpu.yaml" -o Data.train_path=data.h5 -o Data.val_fraction=0
       -o Model.num_layers=1 -o Model.hidden_size=32 -o Model.num_heads=2 -o Model.num_kv_heads=1
       -o Model.head_dim=16 -o Model.ffn_hidden_size=64 -o Model.max_seq_len=16
       -o Global.micro_batch_size=2 -o Global.global_batch_size=4 -o Engine.eval_freq=0)
run_np 1 train "${LLAMA[@]}" -o Engine.max_steps=2 -o Engine.save_steps=2 \
  -o Engine.output_dir=llama > llama.log 2>&1 || { tail -20 llama.log; fail "the llama run"; }
export_to llama/checkpoints --output hf-llama --max-shard-size 10KB
export_to llama/checkpoints --output hf-llama-whole
shards=(hf-llama/model-0*.safetensors)
[ ${#shards[@]} -ge 2 ] || fail "the llama export is not sharded: ${shards[*]}"
expect_error 4 "${shards[0]} is one shard of a sharded model (hf-llama/model.safetensors.index.json maps its tensors to ${#shards[@]} files): give the model's folder (hf-llama)" \
  run_np 1 train "${LLAMA[@]}" -o Engine.output_dir=bad7 -o Checkpoint.init_from="${shards[0]}"
cp -r hf-llama hf-gap && rm "hf-gap/${shards[1]#hf-llama/}"
expect_error 4 "hf-gap/model.safetensors.index.json maps .* to hf-gap/${shards[1]#hf-llama/}, which is missing: copy the whole model folder" \
  run_np 1 train "${LLAMA[@]}" -o Engine.output_dir=bad8 -o Checkpoint.init_from=hf-gap
mkdir -p noconfig && cp hf-llama-whole/model.safetensors noconfig/
expect_error 4 "holds a llama-family model (model.embed_tokens.weight) with no config.json beside it: copy the model's config.json into noconfig" \
  run_np 1 train "${LLAMA[@]}" -o Engine.output_dir=bad9 -o Checkpoint.init_from=noconfig
edited_config hf-llama-whole hf-tied tie_word_embeddings true
expect_error 4 "holds an lm_head.weight unlike its model.embed_tokens.weight, and its config.json ties the two" \
  run_np 1 train "${LLAMA[@]}" -o Engine.output_dir=bad10 -o Model.tie_embeddings=true \
  -o Checkpoint.init_from=hf-tied
edited_config hf-llama-whole hf-swish hidden_act '"swish"'
run_np 1 train "${LLAMA[@]}" -o Optimizer.lr=0 -o Optimizer.min_lr=0 -o Engine.max_steps=1 \
  -o Engine.save_steps=1 -o Engine.output_dir=from-swish -o Checkpoint.init_from=hf-swish \
  > from-swish.log 2>&1 || { tail -20 from-swish.log; fail "init_from a config.json with swish"; }
export_to from-swish/checkpoints --output hf-from-swish
python3 - <<'PY'
from safetensors_tensors import tensors
want, got = tensors("hf-llama-whole/model.safetensors"), tensors("hf-from-swish/model.safetensors")
assert got.keys() == want.keys() and all(got[k] == want[k] for k in want), "from-swish"
print(f"hidden_act swish: the {len(want)} llama tensors came in as they were exported")
PY
echo "PASS: Checkpoint.init_from"
