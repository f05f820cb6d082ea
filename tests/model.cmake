# The GPT stage as a whole on the CPU backend (initial loss, gradients by finite differences) and
# the parameter registry (TP shards, stage partition).
trainer_gtest(model_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/model_test.cpp
              LIBS trainer_model TIMEOUT 120)

# LoRA: the adapter against its closed form, adapter gradients by finite differences, the merged
# model, recomputation, and frozen base weights under AdamW.
trainer_gtest(lora_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/lora_test.cpp
              LIBS trainer_optimizer TIMEOUT 120)
