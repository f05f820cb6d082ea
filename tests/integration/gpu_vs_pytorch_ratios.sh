#!/usr/bin/env bash
# bench/gpu_vs_pytorch.sh's ratio lines with a stand-in trainer (1100 tokens/s), a stand-in peer
# (1000 tokens/s) and an nvidia-smi that reports the GPU busy at 1500 MHz during the first run and
# at 1650 MHz after: the ratio is 1.1 and the ratio per SM clock cycle 1.1 * 1650 / 1500 = 1.21.
# Also what the trainer is given: by default the peer's optimizer settings and 8 global batches
# of random tokens (packed by the trainer: 8 x 8 x 1024 + 1 ids below 50257), with MATCH_PEER=0
# the config's own settings on the 20M-token stream; a side run alone (MODEL:B:trainer) and the
# ratio of each side's best; a peer that fails without a result line; the memory that the
# trainer's memory line planned, carried into its result; bench/llama_vs_pytorch.sh's record (the
# llama family's names, the recompute mode in the layout). Last, what bench/kernel_profile.sh
# runs under ncu (a stand-in): the trainer on that same stream.
#   gpu_vs_pytorch_ratios.sh TRAINER SOURCE_DIR SCRATCH   (the trainer is not used)
set -euo pipefail
SRC=$2 DIR=$3
rm -rf "$DIR" && mkdir -p "$DIR/bin" "$DIR/bench"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cat > "$DIR/bin/nvidia-smi" <<EOF
#!/bin/sh
case "\$*" in  # the name and driver that RECORD=1 asks for
  *query-gpu=name*) echo "NVIDIA H200"; exit ;;
  *query-gpu=driver_version*) echo "580.95.05"; exit ;;
esac
# utilization, SM clock, power: busy at 1500 MHz in the first sampling, 1650 MHz afterwards
if [ -f "$DIR/sampled" ]; then clock=1650; else clock=1500; touch "$DIR/sampled"; fi
for i in 1 2 3; do echo "95, \$clock, 690"; done
exec sleep 30  # the PID the bench kills
EOF
cat > "$DIR/bin/trainer" <<EOF
#!/usr/bin/env bash
echo "\$*" >> "$DIR/trainer-calls"
EOF
cat >> "$DIR/bin/trainer" <<'EOF'
if [ "$1" = pack ]; then  # the token count and range of the u16 --input, as the --output file
  while [ $# -gt 0 ]; do
    case $1 in --input) input=$2 ;; --output) output=$2 ;; esac
    shift
  done
  python3 -c "
import array, sys
ids = array.array('H'); ids.frombytes(open(sys.argv[1], 'rb').read())
open(sys.argv[2], 'w').write('%d %d' % (len(ids), max(ids)))" "$input" "$output"
  exit
fi
out=
for a in "$@"; do case $a in Engine.output_dir=*) out=${a#*=} ;; esac; done
mkdir -p "$out"
echo "memory: a rank of pipeline stage 0 needs ~12.3 GiB at Global.micro_batch_size=8 (trainer plan); cuda:0 (stand-in) holds 139.8 GiB, 139.2 GiB free (cudaMemGetInfo)"
for step in 10 20 30; do
  echo "{\"step\": $step, \"tokens_per_s\": 1100, \"mfu\": 0.5, \"memory_gib\": 1.5, \"loss\": 10.9}"
done > "$out/metrics.jsonl"
EOF
cat > "$DIR/peer.py" <<EOF
import sys
open("$DIR/peer-calls", "a").write(sys.argv[1] + "\n")
print('{"tok_s": 1000}')
EOF
chmod +x "$DIR/bin/nvidia-smi" "$DIR/bin/trainer"
touch "$DIR/bench/random.h5"
out=$(PATH="$DIR/bin:$PATH" WORK="$DIR/bench" STEPS=30 \
  bash "$SRC/bench/gpu_vs_pytorch.sh" "$DIR/bin/trainer" "$DIR/peer.py" 124m:8)
echo "$out"
python3 - "$out" <<'PY'
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
clocks = {l["who"]: l["gpu0"]["sm_mhz"] for l in lines if "who" in l}
assert clocks == {"trainer": 1500, "pytorch": 1650}, clocks
planned = [l["memory_planned"] for l in lines if l.get("who") == "trainer"]
assert planned == ["12.3 GiB"], planned
ratio = [l for l in lines if "ratio_trainer_over_pytorch" in l]
assert len(ratio) == 1, ratio
assert ratio[0]["ratio_trainer_over_pytorch"] == 1.1, ratio
assert ratio[0]["ratio_per_sm_clock"] == 1.21, ratio
print("ok: the ratio and the ratio per SM clock cycle")
PY
# What each mode gave the trainer.
count_max=$(cat "$DIR/bench/peer-b8-t1024.h5")
[ "${count_max% *}" = $((8 * 8 * 1024 + 1)) ] && [ "${count_max#* }" -lt 50257 ] ||
  { echo "FAIL: the peer-matched token file holds '$count_max' (count, largest id)"; exit 1; }
train=$(grep '^train ' "$DIR/trainer-calls")
for arg in Data.train_path="$DIR/bench/peer-b8-t1024.h5" Optimizer.lr=3e-4 Optimizer.warmup_steps=0 \
           Optimizer.decay_style=constant Optimizer.beta2=0.999 Optimizer.weight_decay=0.1; do
  [[ " $train " == *" $arg "* ]] || { echo "FAIL: the matched run lacks -o $arg: $train"; exit 1; }
done
rm -f "$DIR/sampled" "$DIR/trainer-calls"
PATH="$DIR/bin:$PATH" WORK="$DIR/bench" STEPS=30 MATCH_PEER=0 SKIP_PEER=1 \
  bash "$SRC/bench/gpu_vs_pytorch.sh" "$DIR/bin/trainer" - 124m:8 > /dev/null
train=$(grep '^train ' "$DIR/trainer-calls")
[[ " $train " == *" Data.train_path=$DIR/bench/random.h5 "* && " $train " != *Optimizer.* ]] ||
  { echo "FAIL: MATCH_PEER=0 should train on random.h5 with the config's optimizer: $train"; exit 1; }
echo "ok: the trainer gets the peer's optimizer and data, or with MATCH_PEER=0 its config's"
# One side only (MODEL:B:trainer, MODEL:B:peer): the trainer at 8 and 16, the peer at 16 only.
# The ratio at 16 alone, and each side's best against the other's (the trainer's first best, 8).
rm -f "$DIR/sampled" "$DIR/trainer-calls" "$DIR/peer-calls"
out=$(PATH="$DIR/bin:$PATH" WORK="$DIR/bench" STEPS=30 \
  bash "$SRC/bench/gpu_vs_pytorch.sh" "$DIR/bin/trainer" "$DIR/peer.py" 124m:8:trainer 124m:16)
python3 - "$out" "$(cat "$DIR/peer-calls")" "$(grep -c '^train ' "$DIR/trainer-calls")" <<'PY'
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
peer_calls = sys.argv[2].splitlines()
assert len(peer_calls) == 1 and json.loads(peer_calls[0])[0]["B"] == 16, peer_calls
assert sys.argv[3] == "2", "trainer runs: " + sys.argv[3]
ratios = [l for l in lines if "ratio_trainer_over_pytorch" in l]
assert [(r["B"], r["ratio_trainer_over_pytorch"]) for r in ratios] == [(16, 1.1)], ratios
bests = [l for l in lines if "ratio_of_bests" in l]
assert len(bests) == 1 and bests[0]["ratio_of_bests"] == 1.1, bests
assert bests[0]["trainer_best"]["B"] == 8 and bests[0]["pytorch_best"]["B"] == 16, bests
print("ok: one side only, and the best of each side")
PY
# The same in bench/moe_vs_pytorch.sh: the trainer at 8 and 16, the peer at 8 only; the peer-only
# run at 4 has no ratio of its own (no trainer beside it).
rm -f "$DIR/sampled" "$DIR/trainer-calls" "$DIR/peer-calls"
out=$(PATH="$DIR/bin:$PATH" WORK="$DIR/bench" STEPS=30 \
  bash "$SRC/bench/moe_vs_pytorch.sh" "$DIR/bin/trainer" "$DIR/peer.py" olmoe:8 olmoe:16:trainer olmoe:4:peer)
python3 - "$out" "$(cat "$DIR/peer-calls")" "$(grep -c '^train ' "$DIR/trainer-calls")" <<'PY'
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
peer_calls = [json.loads(c)[0]["B"] for c in sys.argv[2].splitlines()]
assert peer_calls == [8, 4], peer_calls
assert sys.argv[3] == "2", "trainer runs: " + sys.argv[3]
ratios = [l for l in lines if "ratio_trainer_over_pytorch" in l]
assert [(r["B"], r["ratio_trainer_over_pytorch"]) for r in ratios] == [(8, 1.1)], ratios
assert not [l for l in lines if "ratio" in l and l.get("B") == 4], lines
bests = [l for l in lines if "ratio_of_bests" in l]
assert len(bests) == 1 and bests[0]["pytorch_best"]["B"] in (8, 4), bests
print("ok: moe_vs_pytorch.sh runs one side only where asked")
PY
if PATH="$DIR/bin:$PATH" WORK="$DIR/bench" bash "$SRC/bench/gpu_vs_pytorch.sh" "$DIR/bin/trainer" \
     "$DIR/peer.py" 124m:8:both 124m:8:neither 2> "$DIR/side.err"; then
  echo "FAIL: an unknown side was accepted"; exit 1
fi
grep -q "unknown side 'neither' in 124m:8:neither" "$DIR/side.err" ||
  { echo "FAIL: the unknown side's message: $(cat "$DIR/side.err")"; exit 1; }
echo "ok: an unknown side stops the bench, naming it"
# A peer that prints nothing: an error line naming its log, no ratio, the bench goes on.
echo 'import sys; sys.exit("peer broke")' > "$DIR/silent_peer.py"
out=$(PATH="$DIR/bin:$PATH" WORK="$DIR/bench" STEPS=30 \
  bash "$SRC/bench/gpu_vs_pytorch.sh" "$DIR/bin/trainer" "$DIR/silent_peer.py" 124m:8:peer)
python3 - "$out" "$DIR/bench/124m-b8-np1.peer.err" <<'PY'
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
errors = [l for l in lines if "peer_error" in l]
assert len(errors) == 1 and sys.argv[2] in errors[0]["peer_error"]["error"], lines
assert not [l for l in lines if "ratio_trainer_over_pytorch" in l or "ratio_of_bests" in l], lines
PY
grep -q "peer broke" "$DIR/bench/124m-b8-np1.peer.err" || { echo "FAIL: the peer's log"; exit 1; }
echo "ok: a peer without a result line gives an error naming its log"
# RECORD=1: one record per comparison appended to RECORD_FILE (the pair at 8, then each side's
# best), with the date, the build (COMMIT), the GPU as nvidia-smi names it (the H200 SXM), the
# driver, the PyTorch script and the command; bench/results_table.py reads them back.
rm -f "$DIR/sampled"
PATH="$DIR/bin:$PATH" WORK="$DIR/bench" STEPS=30 RECORD=1 RECORD_FILE="$DIR/records.jsonl" COMMIT=abc1234 \
  bash "$SRC/bench/gpu_vs_pytorch.sh" "$DIR/bin/trainer" "$DIR/peer.py" 124m:8 124m:16:trainer > "$DIR/record.out"
python3 - "$DIR/records.jsonl" "$DIR" "$(cd "$SRC" && pwd)" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
d, src = sys.argv[2], sys.argv[3]
peer = d[len(src) + 1:] if d.startswith(src + "/") else d  # named from the source tree
assert [r["comparison"] for r in recs] == ["same micro-batch", "best against best"], recs
r = recs[0]
assert r["commit"] == "abc1234" and r["hardware"] == "1x NVIDIA H200 SXM", r
assert r["model"] == "GPT-2 124M" and r["layout"] == "1 GPU" and r["micro_batch"] == 8, r
assert r["tokens_per_s"] == 1100 and r["mfu"] == 0.5 and r["memory_gib"] == 1.5, r
assert r["peer"]["tokens_per_s"] == 1000 and r["ratio"] == 1.1, r
assert r["peer"]["name"] == "PyTorch (%s/peer.py)" % peer and "mfu" not in r["peer"], r
assert r["driver"] == "580.95.05" and r["match_peer"] is True and r["steps"] == 30, r
assert r["command"] == ("STEPS=30 NP=1 bench/gpu_vs_pytorch.sh %s/bin/trainer %s/peer.py "
                        "124m:8 124m:16:trainer" % (d, d)), r
assert len(r["date"]) == 10 and r["memory_planned"] == "12.3 GiB", r
PY
# A peer script from outside bench/ is named in the table's "against" column.
peer_dir=${DIR#"$(cd "$SRC" && pwd)/"}
python3 "$SRC/bench/results_table.py" "$DIR/records.jsonl" |
  grep -qF "| GPT-2 124M | 1x NVIDIA H200 SXM | 1 GPU | 8 | 1,100 | 50.0% | 1.5 GiB | PyTorch ($peer_dir/peer.py), B=8 | 1,000 | **1.100** | abc1234 |" ||
  { echo "FAIL: results_table.py on the records:"; python3 "$SRC/bench/results_table.py" "$DIR/records.jsonl"; exit 1; }
echo "ok: RECORD=1 appends one record per comparison, and results_table.py reads them"
# NP=2: the trainer on two GPUs, then on one as its baseline; the ratio and its record (dp2 with
# ZeRO-1, on in the GPU configs).
rm -f "$DIR/sampled" "$DIR/trainer-calls"
out=$(PATH="$DIR/bin:$PATH" WORK="$DIR/bench" STEPS=30 NP=2 RECORD=1 RECORD_FILE="$DIR/records-np2.jsonl" \
  COMMIT=abc1234 bash "$SRC/bench/gpu_vs_pytorch.sh" "$DIR/bin/trainer" "$DIR/peer.py" 350m:4)
python3 - "$out" "$DIR/records-np2.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
assert [l["gpus"] for l in lines if l.get("who") == "trainer"] == [2, 1], lines
assert not [l for l in lines if l.get("who") == "pytorch"], lines
assert {"model": "350m", "B": 4, "gpus": 2, "ratio_over_one_gpu": 1.0} in lines, lines
(r,) = [json.loads(l) for l in open(sys.argv[2])]
assert r["hardware"] == "2x NVIDIA H200 SXM" and r["layout"] == "dp2 ZeRO-1", r
assert r["peer"]["name"] == "the trainer on 1 GPU" and r["comparison"] == "against one GPU", r
PY
grep -q '^train .*Global.global_batch_size=8 ' "$DIR/trainer-calls" &&
  grep -q '^train .*Global.global_batch_size=4 ' "$DIR/trainer-calls" ||
  { echo "FAIL: NP=2 should train at global batch 8, then 4 on one GPU: $(cat "$DIR/trainer-calls")"; exit 1; }
echo "ok: NP=2 runs the trainer on one GPU as its baseline, and records the ratio"
# bench/llama_vs_pytorch.sh records the same way: the llama family's names, and the recompute
# mode of TRAINER_ARGS in the layout.
rm -f "$DIR/sampled"
PATH="$DIR/bin:$PATH" WORK="$DIR/bench" STEPS=20 RECORD=1 RECORD_FILE="$DIR/records-llama.jsonl" \
  COMMIT=abc1234 TRAINER_ARGS="-o Model.recompute=gelu" \
  bash "$SRC/bench/llama_vs_pytorch.sh" "$DIR/bin/trainer" "$DIR/peer.py" llama-1b:8 > /dev/null
python3 - "$DIR/records-llama.jsonl" "$DIR" <<'PY'
import json, sys
(r,) = [json.loads(l) for l in open(sys.argv[1])]
d = sys.argv[2]
assert r["model"] == "Llama-3.2-1B" and r["layout"] == "1 GPU gelu recompute", r
assert r["tokens_per_s"] == 1100 and r["peer"]["tokens_per_s"] == 1000 and r["ratio"] == 1.1, r
assert r["memory_planned"] == "12.3 GiB" and r["steps"] == 20, r
assert r["command"] == ("STEPS=20 TRAINER_ARGS='-o Model.recompute=gelu' bench/llama_vs_pytorch.sh "
                        "%s/bin/trainer %s/peer.py llama-1b:8" % (d, d)), r
PY
echo "ok: bench/llama_vs_pytorch.sh's RECORD=1 record"
# Without a PEER_SCRIPT the PyTorch side is bench/torch_gpt.py, given the shape as JSON.
real_python=$(command -v python3)
printf '#!/bin/sh\necho "$*" >> "%s/python-calls"\nexec "%s" "$@"\n' "$DIR" "$real_python" > "$DIR/bin/python3"
chmod +x "$DIR/bin/python3"
rm -f "$DIR/sampled" "$DIR/python-calls"
PATH="$DIR/bin:$PATH" WORK="$DIR/bench" STEPS=30 bash "$SRC/bench/gpu_vs_pytorch.sh" "$DIR/bin/trainer" 124m:8 > /dev/null
grep -qF "$SRC/bench/torch_gpt.py [{\"V\":50304,\"L\":12,\"H\":12,\"D\":768,\"T\":1024,\"B\":8,\"compile\":true,\"steps\":30}]" \
  "$DIR/python-calls" || { echo "FAIL: the default PyTorch script's call: $(cat "$DIR/python-calls")"; exit 1; }
rm "$DIR/bin/python3"
python3 "$SRC/bench/torch_gpt.py" --dry-run 350m:16 '{"V":50304,"L":2,"H":4,"D":256,"T":128,"B":2}' > "$DIR/dry.out"
python3 - "$DIR/dry.out" <<'PY'
import json, sys
a, b = [json.loads(l) for l in open(sys.argv[1])]
assert (a["L"], a["H"], a["D"], a["T"], a["B"], a["V"], a["vocab"]) == (24, 16, 1024, 1024, 16, 50304, 50257), a
assert a["compile"] is True and a["steps"] == 30 and (b["L"], b["B"], b["vocab"]) == (2, 2, 50257), b
PY
echo "ok: the default PyTorch side is bench/torch_gpt.py, with the trainer's shapes"
# bench/kernel_profile.sh trains on the same random.h5 as MATCH_PEER=0 (one generator for both),
# under ncu (a stand-in here that records what it runs), over 3 warm-up steps and STEPS profiled.
cat > "$DIR/bin/ncu" <<EOF2
#!/bin/sh
echo "\$*" > "$DIR/ncu-call"
EOF2
chmod +x "$DIR/bin/ncu"
WORK="$DIR/bench" NCU="$DIR/bin/ncu" B=4 STEPS=2 \
  bash "$SRC/bench/kernel_profile.sh" "$DIR/bin/trainer" "$DIR/ncu.csv" -o Model.num_layers=2
call=$(cat "$DIR/ncu-call")
for arg in "--profile-from-start off" "$DIR/bin/trainer train" Data.train_path="$DIR/bench/random.h5" \
           Global.micro_batch_size=4 Engine.max_steps=5 Engine.profile=true Model.num_layers=2; do
  [[ " $call " == *" $arg "* ]] || { echo "FAIL: kernel_profile.sh's ncu call lacks '$arg': $call"; exit 1; }
done
echo "ok: kernel_profile.sh profiles the trainer on the shared random stream"
