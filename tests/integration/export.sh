#!/usr/bin/env bash
# trainer export against an independent GPT-2 forward: a model trained with TP=2 on 2 CPU ranks
# is exported as Hugging Face GPT-2 (model.safetensors, config.json); a forward written here in
# plain Python from transformers' GPT-2 definition (Conv1D weights (in, out), tanh GELU,
# LayerNorm eps 1e-5, tied lm_head) over the exported tensors must give the loss that trainer eval
# gives on the same two samples of the packed text (tokens known from the text itself). The file
# follows the safetensors layout (header length, JSON header padded to 8 bytes, contiguous
# offsets), and the bf16 export holds the f32 export's values rounded to nearest even. Bad input:
# one error line each and the exit code (an existing export or a stale shard of one, a bad
# --dtype, no --output, more than one process 2; no checkpoint, or a dataset where the checkpoint belongs, 4).
source "$(dirname "$0")/lib.sh"
python3 -c "
import random
random.seed(5)
words = 'the cat sat on a mat while dogs ran in fields of gold and rivers of blue'.split()
open('text.txt', 'w').write(' '.join(random.choice(words) for _ in range(700)))"
"$TRAINER" pack --input text.txt --output text.h5 --quiet
run_np 2 train -c "$SRC/configs/tiny-cpu.yaml" -o Distributed.tp_degree=2 \
  -o Data.train_path=text.h5 -o Data.val_fraction=0 -o Model.num_layers=2 \
  -o Model.hidden_size=32 -o Model.num_heads=2 -o Model.max_seq_len=16 \
  -o Global.micro_batch_size=2 -o Global.global_batch_size=4 -o Engine.max_steps=20 \
  -o Engine.save_steps=20 -o Engine.eval_freq=0 -o Engine.logging_freq=10 \
  -o Engine.output_dir=run > train.log 2>&1 || { tail -20 train.log; fail "training run failed"; }
for dtype in f32 bf16; do
  "$TRAINER" export run/checkpoints --output "hf-$dtype" --dtype "$dtype" > "export-$dtype.log" \
    2>&1 || { cat "export-$dtype.log"; fail "trainer export --dtype $dtype failed"; }
done
cat export-f32.log
"$TRAINER" eval run/checkpoints --data text.h5 -b 1 --batches 2 > eval.json 2> eval.err ||
  { cat eval.json eval.err; fail "trainer eval failed"; }

python3 - <<'PY'
import json, math, os, struct

def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0, f"header of {n} bytes: the tensors do not start 8-byte aligned"
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    meta = header.pop("__metadata__")
    assert meta["format"] == "pt", meta
    spans = sorted(h["data_offsets"] for h in header.values())
    assert spans[0][0] == 0 and spans[-1][1] == len(body), "offsets do not cover the data"
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "offsets leave holes or overlap"
    tensors = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        raw = body[a:b]
        if h["dtype"] == "F32":
            values = list(struct.unpack(f"<{len(raw) // 4}f", raw))
        else:
            assert h["dtype"] == "BF16", h
            values = [struct.unpack("<f", struct.pack("<I", u << 16))[0]
                      for u in struct.unpack(f"<{len(raw) // 2}H", raw)]
        assert len(values) == math.prod(h["shape"]), (name, h)
        tensors[name] = (h["shape"], values)
    return tensors

cfg = json.load(open("hf-f32/config.json"))
V, C, L, H, P = (cfg[k] for k in ("vocab_size", "n_embd", "n_layer", "n_head", "n_positions"))
assert (V, C, L, H, P, cfg["n_inner"]) == (257, 32, 2, 2, 16, 128), cfg
assert cfg["model_type"] == "gpt2" and cfg["activation_function"] == "gelu_new", cfg
w = read_safetensors("hf-f32/model.safetensors")
assert len(w) == 2 + 12 * L + 2, sorted(w)
assert w["transformer.wte.weight"][0] == [V, C] and w["transformer.h.0.attn.c_attn.weight"][0] == [C, 3 * C]
assert w["transformer.h.1.mlp.c_proj.weight"][0] == [4 * C, C], w["transformer.h.1.mlp.c_proj.weight"][0]
W = {k: v[1] for k, v in w.items()}

def rne_bf16(x):  # f32 -> bf16 -> f32, round to nearest even
    (u,) = struct.unpack("<I", struct.pack("<f", x))
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return struct.unpack("<f", struct.pack("<I", u << 16))[0]
w16 = read_safetensors("hf-bf16/model.safetensors")
assert sorted(w16) == sorted(w)
for k in w:
    assert w16[k][0] == w[k][0] and w16[k][1] == [rne_bf16(x) for x in w[k][1]], k

def layernorm(x, g, b):
    m = sum(x) / len(x)
    var = sum((v - m) ** 2 for v in x) / len(x)
    r = 1 / math.sqrt(var + 1e-5)
    return [(v - m) * r * gi + bi for v, gi, bi in zip(x, g, b)]

def conv1d(x, name):  # transformers' Conv1D: x (in) @ weight (in, out) + bias
    wt, b = W[name + ".weight"], W[name + ".bias"]
    out = len(b)
    y = list(b)
    for i, xi in enumerate(x):
        row = wt[i * out:(i + 1) * out]
        for j in range(out):
            y[j] += xi * row[j]
    return y

def gelu(x):
    return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

def loss(tokens, targets):
    T, hs = len(tokens), C // H
    h = [[W["transformer.wte.weight"][t * C + c] + W["transformer.wpe.weight"][p * C + c]
          for c in range(C)] for p, t in enumerate(tokens)]
    for l in range(L):
        pre = f"transformer.h.{l}."
        qkv = [conv1d(layernorm(x, W[pre + "ln_1.weight"], W[pre + "ln_1.bias"]), pre + "attn.c_attn")
               for x in h]
        att = [[0.0] * C for _ in range(T)]
        for head in range(H):
            lo = head * hs
            for t in range(T):
                q = qkv[t][lo:lo + hs]
                s = [sum(a * b for a, b in zip(q, qkv[u][C + lo:C + lo + hs])) / math.sqrt(hs)
                     for u in range(t + 1)]
                mx = max(s)
                e = [math.exp(v - mx) for v in s]
                z = sum(e)
                for u in range(t + 1):
                    for d in range(hs):
                        att[t][lo + d] += e[u] / z * qkv[u][2 * C + lo + d]
        h = [[a + b for a, b in zip(x, conv1d(y, pre + "attn.c_proj"))] for x, y in zip(h, att)]
        h = [[a + b for a, b in zip(x, conv1d([gelu(v) for v in conv1d(
                 layernorm(x, W[pre + "ln_2.weight"], W[pre + "ln_2.bias"]), pre + "mlp.c_fc")],
                 pre + "mlp.c_proj"))] for x in h]
    total = 0.0
    wte = W["transformer.wte.weight"]
    for x, target in zip(h, targets):
        x = layernorm(x, W["transformer.ln_f.weight"], W["transformer.ln_f.bias"])
        logits = [sum(a * b for a, b in zip(x, wte[v * C:(v + 1) * C])) for v in range(V)]
        mx = max(logits)
        total += mx + math.log(sum(math.exp(v - mx) for v in logits)) - logits[target]
    return total / T

stream = list(open("text.txt", "rb").read()) + [V - 1]  # trainer pack: bytes, then end of document
T = P
want = sum(loss(stream[i * T:i * T + T], stream[i * T + 1:i * T + T + 1]) for i in range(2)) / 2
got = json.loads(open("eval.json").read().splitlines()[-1])["loss"]
rel = abs(got - want) / want
print(f"plain-Python GPT-2 on the export: {want:.6f}; trainer eval: {got:.6f}; relative {rel:.1e}")
assert rel < 1e-5, "the exported model does not compute the trainer's loss"
PY

# eos_token_id is the training data's end-of-document id, which the checkpoint records: 256 for
# the bytes above; 3 for token ids packed with --eod-id 3.
python3 - <<'PY'
import json
c = json.load(open("hf-f32/config.json"))
assert (c["bos_token_id"], c["eos_token_id"]) == (256, 256), c
PY
python3 -c "import random, struct; random.seed(3); open('ids.u16', 'wb').write(struct.pack('<2000H', *(random.randrange(257) for _ in range(2000))))"
"$TRAINER" pack --tokenizer u16 --vocab-size 257 --eod-id 3 --input ids.u16 --output ids.h5 --quiet
run_np 1 train -c "$SRC/configs/tiny-cpu.yaml" -o Data.train_path=ids.h5 -o Data.val_fraction=0 \
  -o Model.num_layers=1 -o Model.hidden_size=32 -o Model.num_heads=2 -o Model.max_seq_len=16 \
  -o Engine.max_steps=2 -o Engine.save_steps=2 -o Engine.eval_freq=0 -o Engine.output_dir=ids_run \
  > ids_train.log 2>&1 || { tail -20 ids_train.log; fail "training on ids.h5 failed"; }
"$TRAINER" inspect ids_run/checkpoints | grep -q "^  trained on       u16 tokens, end of document 3$" ||
  { "$TRAINER" inspect ids_run/checkpoints; fail "inspect does not show the recorded eod_id"; }
"$TRAINER" export ids_run/checkpoints --output hf-ids > export-ids.log 2>&1 ||
  { cat export-ids.log; fail "export of the ids run failed"; }
python3 - <<'PY'
import json
c = json.load(open("hf-ids/config.json"))
assert (c["bos_token_id"], c["eos_token_id"]) == (3, 3), c
PY
echo "ok: eos_token_id is the data's end of document: 256 (bytes), 3 (--eod-id 3)"
# An eod_id attribute outside the vocabulary (an edited file) would name no token in config.json.
mkdir -p edited && cp -r ids_run/checkpoints/step-00000002 edited/
"$CHECKPOINT_CONFIG" edited/step-00000002/checkpoint.h5 --set-int eod_id 300 ||
  fail "setting eod_id"
expect_error 4 "eod_id attribute 300 is outside the model's vocabulary (vocab_size 257)" \
  "$TRAINER" export edited/step-00000002 --output hf-edited
[[ ! -e hf-edited ]] || fail "a refused export wrote hf-edited"

expect_error 2 "exists" "$TRAINER" export run/checkpoints --output hf-f32
# A shard of an earlier, sharded export: it would lie beside this one's files, named by no index.
mkdir stale && cp hf-f32/model.safetensors stale/model-00003-of-00004.safetensors
expect_error 2 "stale/model-00003-of-00004.safetensors exists (trainer export --output stale)" \
  "$TRAINER" export run/checkpoints --output stale
[[ $(ls stale) == model-00003-of-00004.safetensors ]] || fail "a refused export wrote into stale"
expect_error 2 "use f32 or bf16" "$TRAINER" export run/checkpoints --output other --dtype f16
# Broken folders give one line, not an abort: an index whose weight_map maps a tensor to an
# object (beside the weights, the weights are read; alone, it is named), a config.json folder.
mkdir -p bad-index && printf '{"weight_map": {"lm_head.weight": {"file": "x"}}}' \
  > bad-index/model.safetensors.index.json
expect_error 4 "bad-index/model.safetensors.index.json: a weight_map entry is not" \
  "$TRAINER" inspect bad-index
cp hf-f32/model.safetensors bad-index/
"$TRAINER" inspect bad-index > /dev/null 2>&1 || fail "inspect beside a broken index: exit $?"
cp -r hf-f32 config-folder && rm config-folder/config.json && mkdir config-folder/config.json
expect_error 4 "config-folder/config.json is not a file (a folder, FIFO or device)" \
  "$TRAINER" inspect config-folder
mkdir -p no-tokenizer
expect_error 2 "no tokenizer in no-tokenizer (\-\-tokenizer-dir): expected a Hugging Face tokenizer.json" \
  "$TRAINER" export run/checkpoints --output other --tokenizer-dir no-tokenizer
expect_error 2 "needs --output" "$TRAINER" export run/checkpoints
echo "not a folder" > a-file
expect_error 2 "\-\-output a-file/sub: a-file is a file, not a folder" \
  "$TRAINER" export run/checkpoints --output a-file/sub
expect_error 4 "no checkpoint at nowhere" "$TRAINER" export nowhere --output other
for command in "export text.h5 --output other" "eval text.h5 --data text.h5" "sample text.h5 -n 4"; do
  # shellcheck disable=SC2086  # the words of each command
  expect_error 4 "not a checkpoint (text.h5): it is a packed-token dataset" "$TRAINER" $command
done
expect_error 2 "runs as one process" run_np 2 export run/checkpoints --output other
[ ! -e other ] || fail "a failed export left the folder 'other'"
echo "PASS: trainer export"
