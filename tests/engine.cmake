# End-to-end tests of the trainer binary: every parallel layout against one rank, exact resume,
# bad inputs, a diverging run (stops on every rank, saves nothing from it), a short real run on
# tinyshakespeare, the memory plan against closed-form counts, sampling from a model trained
# on a text known in advance, trainer eval against the training run's own evaluation, and trainer
# export against a GPT-2 forward written independently in Python.
trainer_script_test(parallel_layouts SCRIPT parallel_layouts.sh LABELS "e2e;mpi" TIMEOUT 600)
trainer_script_test(parallel_layouts_llama SCRIPT parallel_layouts_llama.sh LABELS "e2e;mpi" TIMEOUT 600)
trainer_script_test(parallel_layouts_moe SCRIPT parallel_layouts_moe.sh LABELS "e2e;mpi" TIMEOUT 600)
# Expert parallelism against one rank (ep2, ep4, dp2-ep2, tp2-ep2, pp2-ep2, with SP and
# recomputation; capacity dropping; with sharding: sh2-ep2, and sh2-dp2-ep2 on 8 ranks);
# the 8-rank dp2-tp2-ep2 layouts are `slow`.
trainer_script_test(parallel_layouts_ep SCRIPT parallel_layouts_ep.sh LABELS "e2e;mpi" TIMEOUT 600)
trainer_script_test(parallel_layouts_ep8 SCRIPT parallel_layouts_ep8.sh LABELS "e2e;mpi;slow" TIMEOUT 600)
trainer_script_test(parallel_layouts_dropout SCRIPT parallel_layouts_dropout.sh LABELS "e2e;mpi" TIMEOUT 600)
# Data.packing: documents (attention and RoPE positions inside each document) on dp2, tp2-sp,
# pp2, recomputation and dropout, against one rank.
trainer_script_test(parallel_layouts_packing SCRIPT parallel_layouts_packing.sh LABELS "e2e;mpi" TIMEOUT 600)
# Data.shift_windows: shifted windows over two epochs on dp2, pp2, tp2 and another micro-batch split.
trainer_script_test(shift_windows SCRIPT shift_windows.sh LABELS "e2e;mpi" TIMEOUT 600)
# nanoGPT's shakespeare-char recipe shortened, on 1 and 2 CPU ranks (~35 s on 2 idle cores).
trainer_script_test(shakespeare_char SCRIPT shakespeare_char.sh LABELS "e2e;mpi" TIMEOUT 600)
trainer_script_test(resume_exact SCRIPT resume_exact.sh LABELS "e2e;mpi" TIMEOUT 300)
trainer_script_test(data_files SCRIPT data_files.sh LABELS "e2e;mpi" TIMEOUT 300)
trainer_script_test(chat_loss_mask SCRIPT chat_loss_mask.sh LABELS "e2e;mpi" TIMEOUT 600)
trainer_script_test(bad_inputs SCRIPT bad_inputs.sh LABELS "e2e;mpi" TIMEOUT 300)
trainer_script_test(version SCRIPT version.sh LABELS "e2e" TIMEOUT 30)
trainer_script_test(diverge SCRIPT diverge.sh LABELS "e2e;mpi" TIMEOUT 300)
trainer_script_test(shakespeare SCRIPT shakespeare.sh LABELS "e2e;mpi" TIMEOUT 400)
trainer_script_test(watchdog SCRIPT watchdog.sh LABELS "e2e;mpi" TIMEOUT 240)
trainer_script_test(tensorboard SCRIPT tensorboard.sh LABELS "e2e" TIMEOUT 120)
trainer_script_test(plan SCRIPT plan.sh LABELS "e2e" TIMEOUT 60)
trainer_script_test(sample SCRIPT sample.sh LABELS "e2e;mpi" TIMEOUT 300)
trainer_script_test(bpe_pack SCRIPT bpe_pack.sh LABELS "e2e;mpi" TIMEOUT 300)
trainer_script_test(hf_tokenizer SCRIPT hf_tokenizer.sh LABELS "e2e" TIMEOUT 300)
trainer_script_test(eval SCRIPT eval.sh LABELS "e2e;mpi" TIMEOUT 300)
trainer_script_test(export SCRIPT export.sh LABELS "e2e;mpi" TIMEOUT 300)
trainer_script_test(sharding_layouts SCRIPT sharding_layouts.sh LABELS "e2e;mpi" TIMEOUT 900)
trainer_script_test(sharding_layouts_llama SCRIPT sharding_layouts_llama.sh LABELS "e2e;mpi" TIMEOUT 900)
trainer_script_test(sharding_memory SCRIPT sharding_memory.sh LABELS "e2e;mpi" TIMEOUT 600)
trainer_script_test(sharding_resume SCRIPT sharding_resume.sh LABELS "e2e;mpi;checkpoint" TIMEOUT 600)
trainer_script_test(parallel_layouts_lora SCRIPT parallel_layouts_lora.sh LABELS "e2e;mpi" TIMEOUT 600)
trainer_script_test(lora_resume SCRIPT lora_resume.sh LABELS "e2e;mpi" TIMEOUT 600)
