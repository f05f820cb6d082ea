# The bench tools' own checks, all under the label bench (ctest -L bench); those over 20 s also
# under slow, which scripts/run_tests.sh (CI's run) leaves out unless asked for.
# The bench tools' own logic: bench/timeline_summary.py on a synthetic timeline,
# bench/trainer_ab.sh with stand-in trainers, bench/gpu_vs_pytorch.sh's ratio lines with a
# stand-in trainer, peer and nvidia-smi, and bench/kernel_profile.sh's ncu call, all with
# closed-form figures (the tools that need a GPU run only on the GPU machine).
trainer_script_test(timeline_summary SCRIPT timeline_summary.sh LABELS "unit;bench" TIMEOUT 60)
trainer_script_test(trainer_ab SCRIPT trainer_ab.sh LABELS "unit;bench" TIMEOUT 120)
trainer_script_test(gpu_vs_pytorch_ratios SCRIPT gpu_vs_pytorch_ratios.sh LABELS "unit;bench" TIMEOUT 120)
# bench/results_table.py (the results table of docs/performance.md from bench/results/*.jsonl)
# on records whose table is known, and on the repository's own records.
trainer_script_test(results_table SCRIPT results_table.sh LABELS "unit;bench" TIMEOUT 60)
# bench/scaling.sh (issue 7's scaling runs) on 4 CPU ranks with the tiny model: layouts against one
# rank, DP scaling lines, a tp2-pp2 checkpoint resumed on dp4 and one rank, a failing check.
# ~50 s on 2 cores: label slow.
trainer_script_test(scaling_bench SCRIPT scaling_bench.sh LABELS "e2e;mpi;bench;slow" TIMEOUT 300)
# bench/torch_llama.py (the PyTorch peer of llama_vs_pytorch.sh and moe_vs_pytorch.sh) on the CPU
# in the Hugging Face tests' venv: a tiny dense and a tiny MoE model with the trainer's parameter
# counts, finite figures, falling losses (skipped without the venv). ~15 s.
trainer_script_test(torch_llama_peer SCRIPT torch_llama_peer.sh LABELS "e2e;bench" TIMEOUT 300)
