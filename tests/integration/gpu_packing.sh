#!/usr/bin/env bash
# Data.packing: documents on one GPU (skipped, exit 77, without a GPU): a llama-family model
# (GQA, SwiGLU, RoPE restarting per document) trained 50 steps on many short documents
#  - with attention through cuDNN over the documents as a variable-length batch (the route
#    attention_documents must say cudnn in gpu_routes.json where cuDNN is built in), with and
#    without whole-block recomputation,
#  - and pinned to our attention kernels (Engine.gpu_routes),
# each tracking the CPU fp32 curve within gpu_training.sh's bf16 bounds (each step within 5%,
# the mean within 1%).
source "$(dirname "$0")/lib.sh"
require_gpus 1
make_document_dataset data.h5
COMMON=(-o Data.train_path=data.h5 -o Data.val_fraction=0 -o Data.packing=documents
        -o Model.arch=llama -o Model.hidden_size=128 -o Model.num_layers=4 -o Model.num_heads=4
        -o Model.num_kv_heads=2 -o Model.head_dim=32 -o Model.ffn_hidden_size=352
        -o Model.tie_embeddings=false -o Model.norm_eps=1e-6 -o Model.max_seq_len=128
        -o Global.global_batch_size=16 -o Global.micro_batch_size=4 -o Engine.max_steps=50
        -o Engine.logging_freq=1 -o Engine.eval_freq=0 -o Engine.save_steps=0
        -o Optimizer.lr=1e-3 -o Optimizer.warmup_steps=5)
train() {  # name device overrides...
  local name=$1 device=$2; shift 2
  run_np 1 train "${COMMON[@]}" -o Global.device="$device" -o Engine.output_dir="$name" "$@" \
    > "$name.log" 2>&1 || { tail -20 "$name.log"; fail "$name failed"; }
}
train cpu cpu
train gpu cuda
train gpu-rc cuda -o Model.recompute=block
# The route each attention shape of the documents took, from the run's routes file (all cuDNN's
# where the binary has its frontend and the GPU is a Hopper or newer); the same file with those
# routes pinned to our kernels is ours.json.
CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | cut -d. -f1)
EXPECT_CUDNN=0
if "$TRAINER" --version | grep -q "frontend attention" && [ "${CAP:-0}" -ge 9 ]; then EXPECT_CUDNN=1; fi
python3 - gpu/gpu_routes.json ours.json $EXPECT_CUDNN <<'PY' || fail "the GPU run's attention_documents routes"
import json, sys
table = json.load(open(sys.argv[1]))
documents = [r for r in table["routes"] if r["op"] == "attention_documents"]
assert documents, "no attention_documents route"
print("attention_documents:", [(r["shape"], r["chosen"], r["how"]) for r in documents])
assert sys.argv[3] == "0" or all(r["chosen"] == "cudnn" for r in documents), "not cuDNN's"
for r in documents:
    r["chosen"] = "ours"
json.dump(table, open(sys.argv[2], "w"), indent=1)
PY
train ours cuda -o Engine.gpu_routes=ours.json
python3 - ours <<'PY' || fail "the pinned run's attention_documents routes"
import json, sys
routes = [r for r in json.load(open(sys.argv[1] + "/gpu_routes.json"))["routes"]
          if r["op"] == "attention_documents"]
assert routes and all(r["chosen"] == "ours" and r["how"] == "pinned" for r in routes), routes
PY
for run in gpu gpu-rc ours; do
  echo "== $run (bf16) vs CPU (fp32), packed documents"
  compare_curves $run/metrics.jsonl cpu/metrics.jsonl 0.05 0.01 50 || fail "$run leaves the CPU curve"
done
echo "PASS"
