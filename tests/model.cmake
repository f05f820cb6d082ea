# The GPT stage as a whole on the CPU backend (initial loss, gradients by finite differences) and
# the parameter registry (TP shards, stage partition).
trainer_gtest(model_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/model_test.cpp
              LIBS trainer_model TIMEOUT 120)
# Data.packing: documents: a packed sample's per-document losses and gradients equal each
# document's alone.
trainer_gtest(packing_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/packing_test.cpp
              LIBS trainer_model TIMEOUT 60)
# The mixture-of-experts layer against a naive per-token loop (forward, every gradient by finite
# differences, capacity dropping, token-order invariance) and its dispatch plan.
trainer_gtest(moe_layer_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/moe_layer_test.cpp
              LIBS trainer_model TIMEOUT 120)
# Expert parallelism's exchange plan and row movement over an EP group simulated in threads.
trainer_gtest(moe_dispatch_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/moe_dispatch_test.cpp
              LIBS trainer_model TIMEOUT 60)

# The GPU route policy's decision and the routes file (Engine.gpu_routes), on made-up times.
trainer_gtest(route_table_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/route_table_test.cpp
              LIBS trainer_model TIMEOUT 60)

# LoRA: the adapter against its closed form, adapter gradients by finite differences, the merged
# model, recomputation, and frozen base weights under AdamW.
trainer_gtest(lora_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/lora_test.cpp
              LIBS trainer_optimizer TIMEOUT 120)
# The offloaded AdamW's staging ring: many chunks (copies deferred as on a GPU's stream) bit for
# bit against one chunk and against no offload; its planned host bytes against the allocator.
trainer_gtest(adamw_offload_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/adamw_offload_test.cpp
              LIBS trainer_optimizer TIMEOUT 120)
