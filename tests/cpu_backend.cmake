# The CPU fp32 reference backend (src/model/cpu/): every op (GPT-2's and the Llama family's)
# against naive double-precision loops and central finite differences, the vocabulary-parallel
# cross-entropy over two simulated ranks, AdamW against its closed form, grouped-query attention
# against multi-head attention on repeated kv heads, and bit-identical results across calls and
# thread counts; dropout's Philox masks (Random123's known answers, a reference Philox, the keep
# fraction, attention dropout against a double-precision reference and finite differences); the
# grouped matrix products (the MoE experts' GEMMs) against a naive loop; the MoE router's
# load-balancing and z losses against their formula in double; packed documents as a
# variable-length batch (documents_test.cpp: the sequences against the lengths they came from).
trainer_gtest(cpu_backend_test
  SOURCES unit/cpu_backend_test.cpp unit/cpu_matmul_attention_test.cpp
          unit/cpu_loss_optimizer_test.cpp unit/cpu_llama_ops_test.cpp unit/cpu_dropout_test.cpp
          unit/cpu_grouped_matmul_test.cpp unit/cpu_moe_losses_test.cpp
          unit/documents_test.cpp unit/cpu_master_halves_test.cpp
  LIBS trainer_model
  LABELS unit
  TIMEOUT 120)

# Matmul throughput of the CPU kernels (a tool, not a test): cpu_matmul_bench [N C OC [repeats]].
add_executable(cpu_matmul_bench ${PROJECT_SOURCE_DIR}/bench/cpu_matmul_bench.cpp)
target_link_libraries(cpu_matmul_bench PRIVATE trainer_model)
