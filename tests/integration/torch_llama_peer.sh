#!/usr/bin/env bash
# bench/torch_llama.py, the PyTorch peer of bench/llama_vs_pytorch.sh and moe_vs_pytorch.sh, on
# the CPU in the Hugging Face tests' venv (hf_venv.sh: Debian's torch 1.13; skipped, exit 77,
# without it, or with the python named by TRAINER_HF_PYTHON): a tiny dense model (the shape of
# configs/tiny-llama-cpu.yaml) and a tiny MoE (4 experts, top-2 of the logits, a shared expert),
# 12 steps each. Checks: the JSON line's tok_s, mfu and losses are finite; its parameter count
# equals `trainer inspect`'s of the same shape trained by the trainer (and for the MoE its active
# parameters the trainer's to the 0.01M it prints), so both sides train the same model; the first
# loss is ln(V) within 0.1 (weights N(0, 0.02) predict nearly uniformly); the loss falls; and a
# config that lacks a key is refused with one line naming it. With TRAINER_HF_PYTHON naming a
# python whose torch has CUDA (>= 2.8), the peer runs on the GPU: bf16 autocast, fused AdamW and
# torch._grouped_mm for the experts.
source "$(dirname "$0")/lib.sh"
if [ -n "${TRAINER_HF_PYTHON:-}" ]; then PY=$TRAINER_HF_PYTHON
else PY=$(bash "$SRC/tests/integration/hf_venv.sh") || exit $?; fi
PEER=$SRC/bench/torch_llama.py
make_small_dataset data.h5

# trainer_count NAME OVERRIDES...: one step of configs/tiny-llama-cpu.yaml with OVERRIDES,
# checkpointed; the `trainer inspect` lines of its parameters into NAME.inspect.
trainer_count() {
  local name=$1; shift
  "$TRAINER" train -c "$SRC/configs/tiny-llama-cpu.yaml" -o Data.train_path=data.h5 \
    -o Data.val_fraction=0 -o Global.global_batch_size=4 -o Engine.max_steps=1 \
    -o Engine.save_steps=1 -o Engine.eval_freq=0 -o Engine.output_dir="$name" "$@" \
    > "$name.log" 2>&1 || { tail -20 "$name.log"; fail "trainer train $name"; }
  "$TRAINER" inspect "$name/checkpoints" > "$name.inspect" || fail "trainer inspect $name"
}
trainer_count dense
trainer_count moe -o Model.hidden_size=64 -o Model.num_layers=2 -o Model.head_dim=0 \
  -o Model.ffn_hidden_size=96 -o Model.qk_norm=false -o Model.max_seq_len=64 \
  -o Model.norm_eps=1e-5 -o Model.num_experts=4 -o Model.moe_router_topk=2 \
  -o Model.moe_ffn_hidden_size=32 -o Model.moe_shared_expert_intermediate_size=24 \
  -o Model.moe_aux_loss_coeff=0.01 -o Model.moe_router_pre_softmax=false

# The same shapes for the peer: V is the trainer's padded vocabulary (257 -> 384), the ids drawn
# below 257 as the byte tokenizer's.
RUN='"B":2,"compile":false,"steps":12,"warmup":2,"window":5,"vocab":257'
DENSE='{"V":384,"T":128,"L":4,"D":128,"H":4,"KV":2,"HD":32,"F":352,"qk_norm":true,"eps":1e-6,'$RUN'}'
MOE='{"V":384,"T":64,"L":2,"D":64,"H":4,"KV":2,"F":96,"E":4,"K":2,"EF":32,"SE":24,"aux":0.01,'
MOE+='"pre_softmax":false,'$RUN'}'
"$PY" "$PEER" "$DENSE" "$MOE" > peer.jsonl 2> peer.err || { cat peer.err; fail "torch_llama.py"; }
cat peer.jsonl

python3 - peer.jsonl dense.inspect moe.inspect <<'EOF' || fail "torch_llama.py's results"
import json, math, re, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 2, "two JSON lines, got %d" % len(lines)
for r, inspect in zip(lines, sys.argv[2:]):
    name = "MoE" if r["E"] else "dense"
    assert "error" not in r, "%s: %s" % (name, r["error"])
    for k in ("tok_s", "mfu", "loss", "loss_first", "step_ms"):
        assert isinstance(r[k], (int, float)) and math.isfinite(r[k]) and r[k] > 0, (name, k, r[k])
    text = open(inspect).read()
    count = int(re.search(r"^\s*parameters\s+(\d+)", text, re.M).group(1))
    assert r["params"] == count, "%s: peer %d parameters, trainer %d" % (name, r["params"], count)
    if r["E"]:
        active = re.search(r"([0-9.]+)M active of", text).group(1)
        assert "%.2f" % (r["active_params"] / 1e6) == active, (r["active_params"], active)
        assert 0 < r["aux_loss"] < 1, r["aux_loss"]
    assert abs(r["loss_first"] - math.log(r["V"])) < 0.1, (name, r["loss_first"], math.log(r["V"]))
    assert r["loss"] < r["loss_first"] - 0.02, "%s: loss %g -> %g" % (name, r["loss_first"], r["loss"])
    print("%s: %d parameters as the trainer's, loss %.4f -> %.4f" % (name, count, r["loss_first"], r["loss"]))
EOF

# A config without a required key: one line naming it, a non-zero exit.
if "$PY" "$PEER" '{"V":384,"T":16,"L":1,"D":32,"H":2}' > bad.out 2> bad.err; then
  fail "torch_llama.py accepted a config without B"
fi
head -1 bad.err | grep -q 'lacks B' || { cat bad.err; fail "no line naming the missing key B"; }
echo "torch_llama_peer: ok"
