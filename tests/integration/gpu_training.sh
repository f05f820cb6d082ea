#!/usr/bin/env bash
# Training on GPUs against the references (skipped, exit 77, without a GPU):
#  - 50 steps on one GPU (bf16) track the CPU fp32 loss curve within bf16 tolerance, after the
#    run's memory check against its GPU, for GPT-2 and for a llama-family model, and hold the
#    GPU memory that trainer plan gives within 0.25 GiB;
#  - a mixture-of-experts llama: 20 steps on one GPU against the CPU run;
#  - dp2 (with and without the overlapped gradient reduction, and with ZeRO-1), tp2 and pp2 on two
#    GPUs follow the one-GPU curve (when two GPUs are visible);
#  - ZeRO-1's sharded optimizer state, saved whole at step 25, resumes on one GPU and on two with
#    ZeRO-1 again, and both continue the uninterrupted ZeRO-1 curve;
#  - with dropout and no biases: hidden dropout tracks the CPU curve (the same masks), and a run
#    with cuDNN's attention dropout resumed at step 25 continues its own curve;
#  - trainer sample on the GPU (sample.sh with SAMPLE_DEVICE=cuda: a bf16 model trained on one
#    repeated sentence continues a prompt with exactly that text);
#  - trainer eval on the GPU (eval.sh with EVAL_DEVICE=cuda: the loss of a checkpoint on the
#    training run's validation file, against that run's own evaluation);
#  - a diverging run on GPUs stops every rank with exit code 6 and saves nothing from it
#    (diverge.sh with DIVERGE_DEVICE=cuda).
source "$(dirname "$0")/lib.sh"
require_gpus 1
make_small_dataset data.h5
COMMON=(-o Data.train_path=data.h5 -o Data.val_fraction=0 -o Model.hidden_size=128
        -o Model.num_layers=4 -o Model.num_heads=4 -o Model.max_seq_len=128
        -o Global.global_batch_size=16 -o Global.micro_batch_size=4 -o Engine.max_steps=50
        -o Engine.logging_freq=1 -o Engine.eval_freq=0 -o Engine.save_steps=0
        -o Optimizer.lr=1e-3 -o Optimizer.warmup_steps=5)
train() {  # name np device overrides...
  local name=$1 np=$2 device=$3; shift 3
  run_np "$np" train "${COMMON[@]}" -o Global.device="$device" -o Engine.output_dir="$name" "$@" \
    > "$name.log" 2>&1 || { tail -20 "$name.log"; fail "$name failed"; }
}
# GPU_RUN's records carry a plausible SM clock and power for its one rank (the windows shorter
# than NVML's 100 ms sampling carry none), CPU_RUN's none; skipped where the log says NVML could
# not read the GPU.
gpu_report_check() {  # GPU_RUN_METRICS CPU_RUN_METRICS GPU_RUN_LOG
  python3 - "$@" <<'PY'
import json, sys
gpu = [json.loads(line) for line in open(sys.argv[1])]
cpu = [json.loads(line) for line in open(sys.argv[2])]
if any("gpu_sm_mhz" in r for r in cpu):
    sys.exit("the CPU run reports a GPU clock")
if "GPU clock and power not reported" in open(sys.argv[3]).read():
    print("NVML cannot read this GPU: not checked")
    sys.exit(0)
rows = [r for r in gpu if "gpu_sm_mhz" in r]
print("%d records with a GPU clock; the last: %s" % (len(rows), rows[-1] if rows else None))
# One rank: the job's total power is its GPU's, and the energy per token that over tokens/s.
sys.exit(0 if rows and all(100 < r["gpu_sm_mhz"] < 5000 and 5 < r["gpu_power_w"] < 2000 and
                           r["gpu_sm_mhz_lowest_rank"] == 0 and
                           r["gpu_power_w_total"] == r["gpu_power_w"] and
                           abs(r["gpu_joules_per_token"] * r["tokens_per_s"] / r["gpu_power_w"] - 1)
                           < 1e-6 for r in rows) else 1)
PY
}
# bf16 vs fp32: each step within 5%, the mean over 50 steps within 1%. Measured on H200s: worst
# 3.5% in the first build, 0.1-0.4% since, 1.3% (step 20; mean 0.17-0.19%) once docs/*.md, which
# make_small_dataset packed then, changed in the tenth session: the worst step depends on the
# data. On the licence texts (eighteenth session): 0.09%, mean 0.03%.
SAMPLE_DEVICE=cuda bash "$SRC/tests/integration/sample.sh" "$TRAINER" "$SRC" "$SCRATCH/sample" ||
  fail "trainer sample on the GPU"
EVAL_DEVICE=cuda bash "$SRC/tests/integration/eval.sh" "$TRAINER" "$SRC" "$SCRATCH/eval" ||
  fail "trainer eval on the GPU"
DIVERGE_DEVICE=cuda DIVERGE_RANKS=$GPUS bash "$SRC/tests/integration/diverge.sh" "$TRAINER" "$SRC" \
  "$SCRATCH/diverge" || fail "the diverging run on the GPU"
cd "$SCRATCH"
train cpu 1 cpu
train gpu1 1 cuda
echo "== one GPU (bf16) vs CPU (fp32)"
compare_curves gpu1/metrics.jsonl cpu/metrics.jsonl 0.05 0.01 50 || fail "GPU curve leaves the CPU curve"
# The llama family (GQA, SwiGLU, untied head; RMSNorm and RoPE kernels on the GPU), with and
# without whole-block recomputation, against its CPU curve within the same bounds. With Qwen3's
# q/k norm this tiny model meets a loss spike near step 25 that bf16 rounding moves (measured:
# worst 7.4%, mean 0.66%, while without it worst 1.2%), so the q/k norm run is checked in fp32 on
# the GPU instead, where every step matches the CPU to ~1e-5 (the kernels, not the rounding).
LLAMA=(-o Model.arch=llama -o Model.num_kv_heads=2 -o Model.head_dim=32 -o Model.ffn_hidden_size=352
       -o Model.tie_embeddings=false -o Model.norm_eps=1e-6)
train llama-cpu 1 cpu "${LLAMA[@]}"
train llama-gpu1 1 cuda "${LLAMA[@]}"
train llama-gpu1-rc 1 cuda "${LLAMA[@]}" -o Model.recompute=block
for run in llama-gpu1 llama-gpu1-rc; do
  echo "== $run (bf16) vs CPU (fp32)"
  compare_curves $run/metrics.jsonl llama-cpu/metrics.jsonl 0.05 0.01 50 || fail "$run leaves the CPU curve"
done
train llama-qk-cpu 1 cpu "${LLAMA[@]}" -o Model.qk_norm=true
train llama-qk-gpu-fp32 1 cuda "${LLAMA[@]}" -o Model.qk_norm=true -o Engine.mix_precision=fp32
echo "== llama with q/k norm, fp32 on the GPU vs the CPU"
compare_curves llama-qk-gpu-fp32/metrics.jsonl llama-qk-cpu/metrics.jsonl 2e-4 3e-5 50 ||
  fail "the fp32 GPU llama curve leaves the CPU curve"
# A mixture of experts on the llama block (moe.cu's router, permutation and combine, the experts'
# GEMMs over their row groups, aux and z losses), 20 steps, Qwen2-MoE-like (softmax, a shared
# expert) and DeepSeek-like (sigmoid scores, renormalised top-k, the expert bias moved after each
# step): the first step's loss within 1% of the CPU's (the same initial weights and batch), the
# loss falls, and every step within 10% of the CPU's curve, 3% on average (bf16 activations route
# a token whose scores nearly tie to another expert now and then, which the dense curves do not
# see).
moe_check() {  # GPU_METRICS CPU_METRICS
  python3 - "$@" <<'PY'
import json, sys
def losses(path):
    return {r["step"]: r for r in map(json.loads, open(path)) if "loss" in r and "step" in r}
gpu, cpu = losses(sys.argv[1]), losses(sys.argv[2])
first, last = min(gpu), max(gpu)
print("first loss %.4f (CPU %.4f), last %.4f (CPU %.4f), aux %s" % (
    gpu[first]["loss"], cpu[first]["loss"], gpu[last]["loss"], cpu[last]["loss"],
    gpu[last].get("moe_aux_loss")))
assert abs(gpu[first]["loss"] / cpu[first]["loss"] - 1) < 0.01, "first loss off the CPU's"
assert gpu[last]["loss"] < gpu[first]["loss"] - 0.1, "the loss does not fall"
assert "moe_aux_loss" in gpu[last], "no moe_aux_loss in metrics.jsonl"
diffs = [abs(gpu[s]["loss"] / cpu[s]["loss"] - 1) for s in gpu]
print("worst step %.4f, mean %.4f" % (max(diffs), sum(diffs) / len(diffs)))
assert max(diffs) < 0.10 and sum(diffs) / len(diffs) < 0.03, "the curve leaves the CPU's"
PY
}
MOE=("${LLAMA[@]}" -o Model.num_experts=8 -o Model.moe_router_topk=2 -o Model.moe_ffn_hidden_size=96
     -o Model.moe_aux_loss_coeff=0.01 -o Model.moe_z_loss_coeff=0.001 -o Engine.max_steps=20)
for variant in "qwen2 -o Model.moe_shared_expert_intermediate_size=64" \
               "deepseek -o Model.moe_router_score_function=sigmoid -o Model.moe_norm_topk_prob=true -o Model.moe_router_bias_update_rate=0.001"; do
  set -- $variant; name=moe-$1; shift
  train "$name-cpu" 1 cpu "${MOE[@]}" "$@"
  train "$name-gpu1" 1 cuda "${MOE[@]}" "$@"
  echo "== $name llama, one GPU (bf16) vs CPU (fp32)"
  moe_check "$name-gpu1/metrics.jsonl" "$name-cpu/metrics.jsonl" || fail "$name on the GPU"
done
# Dropout, GPT-2 without biases: the GPU's hidden-dropout masks are the CPU's (philox.h), so with
# hidden dropout the bf16 curve tracks the CPU's within the bounds above. cuDNN's attention
# dropout draws masks of its own (seeded from the step, layer and micro-batch), so that run is
# checked against itself: its step-25 checkpoint resumed continues its curve as the GPU resumes do.
DROP=(-o Model.bias=false -o Model.hidden_dropout=0.2)
train drop-cpu 1 cpu "${DROP[@]}"
train drop-gpu1 1 cuda "${DROP[@]}"
echo "== hidden dropout, no biases: one GPU (bf16) vs CPU (fp32)"
compare_curves drop-gpu1/metrics.jsonl drop-cpu/metrics.jsonl 0.05 0.01 50 ||
  fail "the GPU curve with hidden dropout leaves the CPU curve"
train adrop-gpu1 1 cuda "${DROP[@]}" -o Model.attention_dropout=0.2 -o Engine.save_steps=25 \
  -o Checkpoint.keep_last=0
mkdir -p adrop-resume/checkpoints && cp -r adrop-gpu1/checkpoints/step-00000025 adrop-resume/checkpoints/
train adrop-resume 1 cuda "${DROP[@]}" -o Model.attention_dropout=0.2 --resume auto
grep -q "resumed from" adrop-resume.log || fail "adrop-resume did not resume"
echo "== attention dropout (cuDNN's masks): steps 26-50 resumed vs the uninterrupted run"
compare_curves adrop-resume/metrics.jsonl adrop-gpu1/metrics.jsonl 0.01 0.002 25 ||
  fail "the resumed run with attention dropout leaves its own curve"
echo "== the GPU run held its planned memory against its GPU's (cudaMemGetInfo) before allocating"
grep "^memory: a rank of pipeline stage 0 needs ~[0-9.]* [KMG]iB at .* cuda:0 (.*) holds [0-9.]* GiB, [0-9.]* GiB free (cudaMemGetInfo)$" gpu1.log ||
  fail "gpu1: no memory line for its GPU"
echo "== the GPU's memory in use (total minus free) within 0.25 GiB of the plan, GPT-2 and llama"
for run in gpu1 llama-gpu1; do
  python3 - "$run/metrics.jsonl" <<'PY' || fail "$run: memory in use is not what trainer plan gives"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"memory_planned_gib"' in l][-1]
used, planned = r["memory_gib"], r["memory_planned_gib"]
print(f"{sys.argv[1]}: {used:.2f} GiB in use, {planned:.2f} GiB planned")
sys.exit(abs(used - planned) > 0.25)
PY
done
echo "== the GPU run reports its GPU's clock and power (NVML); the CPU run reports none"
gpu_report_check gpu1/metrics.jsonl cpu/metrics.jsonl gpu1.log || fail "GPU clock and power in metrics.jsonl"
if [ "$GPUS" -ge 2 ]; then
  for layout in "dp2" "dp2-overlap -o Distributed.overlap_grad_reduce=true" \
                "dp2-zero1 -o Distributed.zero_stage1=true -o Engine.save_steps=25 -o Checkpoint.keep_last=0" \
                "tp2 -o Distributed.tp_degree=2" "pp2 -o Distributed.pp_degree=2"; do
    set -- $layout; name=$1; shift
    train "$name" 2 cuda "$@"
    echo "== $name on two GPUs vs one GPU"
    compare_curves "$name/metrics.jsonl" gpu1/metrics.jsonl 0.05 0.01 50 || fail "$name leaves the one-GPU curve"
  done
  for resumed in "resume-gpu1 1" "resume-zero1 2 -o Distributed.zero_stage1=true"; do
    set -- $resumed; name=$1 np=$2; shift 2
    mkdir -p "$name/checkpoints" && cp -r dp2-zero1/checkpoints/step-00000025 "$name/checkpoints/"
    train "$name" "$np" cuda --resume auto "$@"
    grep -q "resumed from" "$name.log" || fail "$name did not resume"
    echo "== $name: steps 26-50 from dp2-zero1's step-25 checkpoint vs dp2-zero1"
    compare_curves "$name/metrics.jsonl" dp2-zero1/metrics.jsonl 0.01 0.002 25 ||
      fail "$name leaves the ZeRO-1 curve"
  done
else
  echo "one GPU only: the two-GPU layouts were not run"
fi
