# The GPU path as a whole: the model's loss and gradients against the CPU path (gpu label, skipped
# without a GPU), and training runs on one and two GPUs against the CPU and one-GPU loss curves.
if(TRAINER_WITH_CUDA)
  trainer_gtest(gpu_model_test
                SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_test_main.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/gpu_model_test.cpp
                LIBS trainer_model LABELS gpu TIMEOUT 300)
  # LoRA on the GPU (bf16, frozen bf16 base) against the CPU path.
  trainer_gtest(gpu_lora_test
                SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_test_main.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/gpu_lora_test.cpp
                LIBS trainer_model LABELS gpu TIMEOUT 300)
  # The offloaded AdamW's staging ring on the GPU (pinned slots, asynchronous copies): chunked
  # against one chunk bit for bit, and against the device AdamW; the device AdamW's master weights
  # kept as halves against an f32 master copy bit for bit, and set again as a resume sets them.
  trainer_gtest(gpu_offload_test
                SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_test_main.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/gpu_offload_test.cpp
                LIBS trainer_optimizer LABELS gpu TIMEOUT 300)
endif()
trainer_script_test(gpu_training SCRIPT gpu_training.sh LABELS "gpu;e2e" TIMEOUT 600)
# Data.packing: documents on one GPU: cuDNN's attention over the documents, and our kernels
# pinned, against the CPU curve.
trainer_script_test(gpu_packing SCRIPT gpu_packing.sh LABELS "gpu;e2e" TIMEOUT 600)
# Two ranks on one GPU: one line naming them, before NCCL's setup.
trainer_script_test(gpu_shared_gpu SCRIPT gpu_shared_gpu.sh LABELS "gpu;e2e" TIMEOUT 300)
# Distributed.gpu_collectives=mpi: layouts (dense, sharding, expert parallelism) with every rank
# on one GPU against one GPU, and trainer check on a shared GPU.
trainer_script_test(gpu_staged_layouts SCRIPT gpu_staged_layouts.sh LABELS "gpu;e2e;mpi" TIMEOUT 900)
trainer_script_test(gpu_sharding SCRIPT gpu_sharding.sh LABELS "gpu;e2e" TIMEOUT 900)
# Engine.gpu_routes: a run's routes file pins another run's kernels (bit for bit), refusals.
trainer_script_test(gpu_routes SCRIPT gpu_routes.sh LABELS "gpu;e2e" TIMEOUT 600)
# The MoE experts on our sm90 grouped GEMMs (pinned, and forced by TRAINER_GROUPED_GEMM) against
# the CPU curve (sm_90 GPUs).
trainer_script_test(gpu_grouped_sm90 SCRIPT gpu_grouped_sm90.sh LABELS "gpu;e2e" TIMEOUT 600)
