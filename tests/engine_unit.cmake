# Engine pieces with closed-form answers (LR schedule, 1F1B slots, phase timer).
trainer_gtest(engine_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/engine_test.cpp
              LIBS trainer_engine TIMEOUT 60)
# trainer sample's draw of the next token against the softmax computed independently.
trainer_gtest(token_draw_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/token_draw_test.cpp
              ${PROJECT_SOURCE_DIR}/src/cli/token_draw.cpp LIBS trainer_common TIMEOUT 60)
# The GPU report (clock, power, the job's slowest GPU) from windows and a fake world's all-reduces.
trainer_gtest(gpu_monitor_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/gpu_monitor_test.cpp
              LIBS trainer_engine TIMEOUT 60)
# One rank's memory plan against closed-form counts, and the fit check's way out.
trainer_gtest(memory_plan_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/memory_plan_test.cpp
              LIBS trainer_engine TIMEOUT 60)
target_compile_definitions(memory_plan_test PRIVATE TRAINER_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
# Which device groups share a communicator, against the groups' member lists.
trainer_gtest(device_groups_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/device_groups_test.cpp
              LIBS trainer_common TIMEOUT 60)
# The GPU route report (Engine.gpu_routes) from one rank's view of a fake world of three.
trainer_gtest(gpu_routes_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/gpu_routes_test.cpp
              LIBS trainer_engine TIMEOUT 60)
