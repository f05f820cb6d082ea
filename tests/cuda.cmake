# CUDA backend tests. cuda_availability_test runs in every build (MakeCudaBackend's answer without
# CUDA, without a GPU, or with one). cuda_backend_test compares every CudaBackend op with the CPU
# fp32 backend on a GPU (label gpu), dropout's masks among them (cuda_dropout_test.cpp) and
# attention over packed documents through cuDNN (cuda_attention_documents_test.cpp); it exits
# 77 (skipped) where no GPU is visible.
trainer_gtest(cuda_availability_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_availability_test.cpp
              LIBS trainer_model TIMEOUT 60)
if(TRAINER_WITH_CUDA)
  trainer_gtest(cuda_backend_test
                SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_test_main.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_layers_test.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_routes_test.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_attention_test.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_attention_documents_test.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_llama_ops_test.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_moe_test.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_grouped_matmul_test.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_grouped_sm90_test.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_moe_losses_test.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_loss_optimizer_test.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_perf_test.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_sm90_gemm_test.cpp
                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/cuda_dropout_test.cpp
                LIBS trainer_model LABELS gpu TIMEOUT 600)
endif()
if(TRAINER_WITH_CUDA AND TRAINER_WITH_CUDNN_FRONTEND)
  # Not a test: cuBLASLt's GELU epilogues against cuDNN's fused matmul graphs (bench/).
  add_executable(gemm_gelu_fusion_bench ${PROJECT_SOURCE_DIR}/bench/gemm_gelu_fusion_bench.cpp)
  target_include_directories(gemm_gelu_fusion_bench SYSTEM PRIVATE ${CUDNN_FRONTEND_INCLUDE_DIR}
                                                                   ${CUDNN_INCLUDE_DIR})
  target_link_libraries(gemm_gelu_fusion_bench PRIVATE trainer_model)
endif()
if(TRAINER_WITH_CUDA)
  # Not a test: cuBLASLt's GEMM candidates timed idle and at the power limit (bench/).
  add_executable(gemm_power_bench ${PROJECT_SOURCE_DIR}/bench/gemm_power_bench.cpp)
  target_include_directories(gemm_power_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(gemm_power_bench PRIVATE CUDA::cudart CUDA::cublasLt ${CMAKE_DL_LIBS})
endif()
if(TRAINER_WITH_CUDA AND TARGET CUDA::cupti)
  # Not a test: a CUPTI injection library that records each kernel's real start and end in a
  # running program (bench/kernel_timeline.cpp, bench/timeline_summary.py).
  add_library(kernel_timeline SHARED ${PROJECT_SOURCE_DIR}/bench/kernel_timeline.cpp)
  target_link_libraries(kernel_timeline PRIVATE CUDA::cupti)
endif()
if(TRAINER_WITH_CUDA)
  # Not a test: a streaming kernel on fewer SMs, alone and between GEMMs, at the power limit (bench/).
  add_executable(memory_energy_bench ${PROJECT_SOURCE_DIR}/bench/memory_energy_bench.cu)
  target_include_directories(memory_energy_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(memory_energy_bench PRIVATE CUDA::cudart CUDA::cublasLt ${CMAKE_DL_LIBS})
endif()
if(TRAINER_WITH_CUDA)
  # Not a test: the GELU GEMMs' routes through CudaBackend, idle and at the power limit (bench/).
  add_executable(gelu_route_power_bench ${PROJECT_SOURCE_DIR}/bench/gelu_route_power_bench.cpp)
  target_link_libraries(gelu_route_power_bench PRIVATE trainer_model ${CMAKE_DL_LIBS})
endif()
