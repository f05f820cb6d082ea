# Checkpoint tests (src/checkpoint, tests/integration/checkpoint_*.sh): the safetensors reader and
# writer against hand-built files, SIGKILL of the writer during saves, full and read-only disks,
# resume on other layouts, damaged files and the fallback, shape mismatches, inspect, retention,
# preemption under plain mpirun, the folder's lock (one run writes a folder at a time), and a
# fresh run's weights from a checkpoint or a Hugging Face GPT-2 (Checkpoint.init_from), and the
# llama family in and out of Hugging Face folders against transformers itself (hf_llama).
trainer_gtest(filesystem_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/filesystem_test.cpp
              LIBS trainer_common TIMEOUT 60)
trainer_gtest(safetensors_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/safetensors_test.cpp
              LIBS trainer_checkpoint TIMEOUT 60)
trainer_script_test(checkpoint_kill SCRIPT checkpoint_kill.sh LABELS "e2e;mpi" TIMEOUT 300)
trainer_script_test(checkpoint_disk SCRIPT checkpoint_disk.sh LABELS "e2e;mpi" TIMEOUT 240)
trainer_script_test(checkpoint_layouts SCRIPT checkpoint_layouts.sh LABELS "e2e;mpi" TIMEOUT 300)
trainer_script_test(checkpoint_layouts_llama SCRIPT checkpoint_layouts_llama.sh LABELS "e2e;mpi" TIMEOUT 300)
trainer_script_test(checkpoint_layouts_moe SCRIPT checkpoint_layouts_moe.sh LABELS "e2e;mpi" TIMEOUT 600)
# Expert parallelism: saved on dp2-tp2-ep2, resumed on ep4, tp2 and one rank; bit-exact on tp2-ep2.
trainer_script_test(checkpoint_layouts_ep SCRIPT checkpoint_layouts_ep.sh LABELS "e2e;mpi" TIMEOUT 600)
trainer_script_test(checkpoint_integrity SCRIPT checkpoint_integrity.sh LABELS "e2e;mpi" TIMEOUT 240)
trainer_script_test(checkpoint_preempt SCRIPT checkpoint_preempt.sh LABELS "e2e;mpi" TIMEOUT 240)
# Rewinding, a fresh run in a used folder, the fallback's direction, stray *.tmp entries.
trainer_script_test(checkpoint_lifecycle SCRIPT checkpoint_lifecycle.sh LABELS "e2e;mpi" TIMEOUT 240)
trainer_script_test(metrics_resume SCRIPT metrics_resume.sh LABELS "e2e;mpi" TIMEOUT 240)
# Checkpoints that do not fit the run: extra tensors, another LoRA base, adapters vs weights.
trainer_script_test(checkpoint_mismatch SCRIPT checkpoint_mismatch.sh LABELS "e2e;mpi" TIMEOUT 240)
# A load failure on one rank only (it cannot see rank 0's checkpoint): one line, from that rank.
trainer_script_test(rank_errors SCRIPT rank_errors.sh LABELS "e2e;mpi" TIMEOUT 240)
trainer_script_test(checkpoint_lock SCRIPT checkpoint_lock.sh LABELS "e2e;mpi" TIMEOUT 240)
trainer_script_test(checkpoint_async SCRIPT checkpoint_async.sh LABELS "e2e;mpi" TIMEOUT 300)
trainer_script_test(init_from SCRIPT init_from.sh LABELS "e2e;mpi" TIMEOUT 240)
trainer_script_test(hf_llama SCRIPT hf_llama.sh LABELS "e2e;mpi" TIMEOUT 600)
# Qwen2-MoE, Mixtral (and Qwen3-MoE under transformers 5) in and out, the refusals (hf_moe).
trainer_script_test(hf_moe SCRIPT hf_moe.sh LABELS "e2e;mpi" TIMEOUT 600)
# Three training steps of each against torch's AdamW on transformers' models (hf_training).
trainer_script_test(hf_training SCRIPT hf_training.sh LABELS "e2e;mpi" TIMEOUT 600)
# LoRA on a Hugging Face llama: export merged (transformers) and as a PEFT adapter (PEFT).
trainer_script_test(hf_lora SCRIPT hf_lora.sh LABELS "e2e;mpi" TIMEOUT 600)
# docs/fine-tuning.md end to end on the CPU (import, chat pack, LoRA and full, eval, export).
trainer_script_test(fine_tuning SCRIPT fine_tuning.sh LABELS "e2e;mpi" TIMEOUT 600)
# The checkpoint CRC-32 (zlib's crc32): the check value, a bitwise CRC-32, and a checkpoint written
# by the trainer's earlier hand-written CRC-32 (tests/fixtures/).
# The checkpoint's HDF5 chunks: at most ~1 Mi elements, 3-D expert tensors included.
trainer_gtest(checkpoint_layout_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/checkpoint_layout_test.cpp
              LIBS trainer_checkpoint TIMEOUT 60)
# A directory's step folders newest first by step, past eight digits (step-100000000 on).
trainer_gtest(checkpoint_folders_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/checkpoint_folders_test.cpp
              LIBS trainer_checkpoint TIMEOUT 60)
trainer_gtest(checksum_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/checksum_test.cpp
              LIBS trainer_checkpoint TIMEOUT 60)
target_compile_definitions(checksum_test PRIVATE TRAINER_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
trainer_script_test(checkpoint_kill_sharded SCRIPT checkpoint_kill_sharded.sh LABELS "e2e;mpi;checkpoint" TIMEOUT 600)
# The test tool compare_checkpoints itself: tensors and the manifest's root attributes.
trainer_gtest(compare_checkpoints_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/compare_checkpoints_test.cpp
              LIBS trainer_io TIMEOUT 60)
target_compile_definitions(compare_checkpoints_test PRIVATE
                           COMPARE_CHECKPOINTS="$<TARGET_FILE:compare_checkpoints>")
add_dependencies(compare_checkpoints_test compare_checkpoints)
