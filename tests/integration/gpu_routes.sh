#!/usr/bin/env bash
# Engine.gpu_routes (docs/gpu.md): a run writes the routes it chose, another run pinned by that
# file takes the same ones and repeats the same training bit for bit, and a file naming a route
# that does not apply is refused with exit code 2 and one line. On the CPU the key is ignored,
# said once; the GPU part is skipped (exit 77) without a GPU.
#
# Bit for bit needs deterministic kernels beside the routes: the data's token ids are all distinct
# (the embedding's backward adds a token's rows atomically: one add per id and micro-batch is
# order-free), and the repeated runs pin attention to our kernels (cuDNN's fused SDPA backward
# may sum dQ atomically, in another order each run).
source "$(dirname "$0")/lib.sh"
VOCAB=32768
python3 - <<'PY'
import random, struct
ids = list(range(32000))  # each id once: 500 samples of 64 tokens (6 steps take 384)
random.Random(5).shuffle(ids)
open("ids.bin", "wb").write(struct.pack("<%dH" % len(ids), *ids))
PY
"$TRAINER" pack --tokenizer u16 --vocab-size $VOCAB --input ids.bin --output data.h5 >/dev/null ||
  fail "pack"
COMMON=(-o Data.train_path=data.h5 -o Data.val_fraction=0 -o Model.vocab_size=$VOCAB
        -o Model.hidden_size=256 -o Model.num_layers=4 -o Model.num_heads=4
        -o Model.max_seq_len=64 -o Global.global_batch_size=64 -o Global.micro_batch_size=4
        -o Engine.max_steps=6 -o Engine.logging_freq=1 -o Engine.eval_freq=0
        -o Engine.save_steps=0 -o Optimizer.lr=1e-3 -o Optimizer.warmup_steps=2)
train() {  # name device overrides...
  local name=$1 device=$2; shift 2
  run_np 1 train "${COMMON[@]}" -o Global.device="$device" -o Engine.output_dir="$name" "$@" \
    > "$name.log" 2>&1
}

# CPU: accepted, ignored (said once), no routes written.
train cpu cpu -o Engine.max_steps=1 -o Global.global_batch_size=8 \
  -o Engine.gpu_routes=/nonexistent/routes.json ||
  { tail -5 cpu.log; fail "a CPU run with Engine.gpu_routes failed"; }
[ "$(grep -c 'Engine.gpu_routes=/nonexistent/routes.json is ignored' cpu.log)" = 1 ] ||
  fail "the CPU run does not say once that it ignores Engine.gpu_routes"
[ ! -e cpu/gpu_routes.json ] || fail "a CPU run wrote gpu_routes.json"
! grep -q gpu_routes cpu/metrics.jsonl || fail "a CPU run's metrics name GPU routes"

GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${GPUS:-0}" -ge 1 ] || { echo "skip: no GPU visible"; exit 77; }

# A: routes timed; the table printed once, written to the file, the first metrics record and the
# checkpoint's manifest. 16 micro-batches of 4 layers: the GELU gradient's 13 candidates are timed
# within step 1 (an untimed call and 4 turns: 53 calls).
train auto cuda -o Engine.save_steps=6 || { tail -20 auto.log; fail "the auto run failed"; }
[ "$(grep -c '^GPU routes (op | shape' auto.log)" = 1 ] || fail "the routes table is not printed once"
# The manifest's gpu_routes attribute, read by h5dump (hdf5-tools) or, where it is missing, h5py.
manifest_routes() {
  if command -v h5dump > /dev/null; then h5dump -a gpu_routes "$1"; else
    python3 -c 'import h5py, sys; print(h5py.File(sys.argv[1], "r").attrs["gpu_routes"])' "$1"; fi
}
manifest_routes auto/checkpoints/step-00000006/checkpoint.h5 | grep -q gelu_gemm_forward ||
  fail "the checkpoint's manifest has no gpu_routes"
python3 - auto <<'PY' || fail "the auto run's routes"
import json, sys
out = sys.argv[1]
routes = json.load(open(out + "/gpu_routes.json"))
assert routes["format"] == "trainer-gpu-routes" and routes["version"] == 1, routes
ops = {r["op"] for r in routes["routes"]}
for op in ("gelu_gemm_forward", "cublaslt_gemm", "attention"):
    assert op in ops, (op, sorted(ops))
records = [json.loads(l) for l in open(out + "/metrics.jsonl")]
assert records[0]["gpu_routes"] == routes, "the first record's gpu_routes is not the file's"
assert all("gpu_routes" not in r for r in records[1:]), "gpu_routes in a later record"
for r in routes["routes"]:  # the chosen one is the fastest timed one (ties: the first)
    if r["how"] == "timed" and r["chosen"] is not None:
        times = [(c["ms"], i) for i, c in enumerate(r["candidates"]) if c["ms"] is not None]
        assert r["candidates"][min(times)[1]]["name"] == r["chosen"], r
print("%d routes, ops %s" % (len(routes["routes"]), sorted(ops)))
PY

# D: pinned by A's file as it is: the same routes, and step 1's loss (before any update: the
# forward's routes alone) bit for bit.
train same cuda -o Engine.max_steps=1 -o Engine.gpu_routes=auto/gpu_routes.json ||
  { tail -20 same.log; fail "the run pinned by auto/gpu_routes.json failed"; }
python3 - auto same <<'PY' || fail "the pinned run's routes or step 1 differ from the auto run's"
import json, sys
a, b = (json.load(open(d + "/gpu_routes.json"))["routes"] for d in sys.argv[1:3])
ca, cb = ({(r["op"], r["shape"]): r["chosen"] for r in rs} for rs in (a, b))
# Every route the pinned run took is the auto run's, pinned; the libraries' own routes for a
# shape that the auto run timed only as a candidate of another op are not taken again.
assert all(ca.get(k) == v for k, v in cb.items()), "different routes"
assert all(r["how"] == "pinned" for r in b), [r for r in b if r["how"] != "pinned"]
for k in ca:
    if k[0] in ("gelu_gemm_forward", "gelu_gemm_gradient", "attention"):
        assert k in cb, ("not taken by the pinned run", k)
la, lb = (json.loads(open(d + "/metrics.jsonl").readline())["loss"] for d in sys.argv[1:3])
assert la == lb, (la, lb)
print("same routes; step 1 loss", la)
PY

# B and C: the same pins, attention on our kernels: the same losses and the same checkpoint, bit for bit.
python3 - <<'PY'
import json
routes = json.load(open("auto/gpu_routes.json"))
for r in routes["routes"]:
    if r["op"] == "attention":
        r["chosen"] = "ours"
json.dump(routes, open("pins.json", "w"), indent=1)
PY
for run in pinned1 pinned2; do
  train $run cuda -o Engine.save_steps=6 -o Engine.gpu_routes=pins.json ||
    { tail -20 $run.log; fail "$run failed"; }
done
python3 - pinned1 pinned2 <<'PY' || fail "two runs pinned by one file differ"
import json, sys
losses = [[json.loads(l)["loss"] for l in open(d + "/metrics.jsonl") if '"loss"' in l]
          for d in sys.argv[1:3]]
assert len(losses[0]) == 6 and losses[0] == losses[1], losses
print("6 losses equal:", losses[0])
PY
"$COMPARE_CHECKPOINTS" pinned1/checkpoints/step-00000006/checkpoint.h5 \
  pinned2/checkpoints/step-00000006/checkpoint.h5 0 || fail "the pinned runs' checkpoints differ"

# Refusals: exit 2 and one error line naming the file, op, shape and candidate; for a candidate
# that no op has (at start) and for an algorithm cuBLASLt does not offer for the shape (on the
# shape's first call).
refused() {  # name op candidate reason
  local name=$1 op=$2 candidate=$3 reason=$4
  python3 - "$op" "$candidate" "$name.json" <<'PY'
import json, sys
op, candidate, path = sys.argv[1:4]
routes = json.load(open("auto/gpu_routes.json"))
# Not a GELU GEMM's shape: those run inside the GELU GEMM's own route choice.
r = next(r for r in routes["routes"] if r["op"] == op and "GELU" not in r["shape"])
r["chosen"] = candidate
json.dump(routes, open(path, "w"))
open(path + ".shape", "w").write(r["shape"])
PY
  local rc=0
  train "$name" cuda -o Engine.gpu_routes="$name.json" || rc=$?
  [ "$rc" = 2 ] || { tail -5 "$name.log"; fail "$name: exit $rc, want 2"; }
  local lines
  lines=$(grep -c '^error:' "$name.log")
  [ "$lines" = 1 ] || { cat "$name.log"; fail "$name: $lines error lines, want 1"; }
  local line shape
  line=$(grep '^error:' "$name.log")
  shape=$(cat "$name.json.shape")
  for want in "$name.json" "op $op" "shape $shape" "candidate $candidate" "$reason"; do
    [[ "$line" == *"$want"* ]] || fail "$name: the error does not say '$want': $line"
  done
  echo "$name: $line"
}
refused unknown gelu_gemm_forward no_such_kernel "is not one of the op's routes"
refused not_offered cublaslt_gemm algo99999.t0.s0.k0.r0.w0.c0.g0.i0 "is not a route of this shape"
echo "PASS"
