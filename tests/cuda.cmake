# CUDA backend tests. cuda_availability_test runs in every build (MakeCudaBackend's answer without
# CUDA, without a GPU, or with one). cuda_backend_test compares every CudaBackend op with the CPU
# fp32 backend on a GPU (label gpu); it exits 77 (skipped) where no GPU is visible.
trainer_gtest(cuda_availability_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_availability_test.cpp
              LIBS trainer_model TIMEOUT 60)
if(TRAINER_WITH_CUDA)
  trainer_gtest(cuda_backend_test
                SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_test_main.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_layers_test.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_attention_test.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_loss_optimizer_test.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_perf_test.cpp
                LIBS trainer_model LABELS gpu TIMEOUT 300)
endif()
