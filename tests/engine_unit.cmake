# Engine pieces with closed-form answers (LR schedule, 1F1B slots, phase timer).
trainer_gtest(engine_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/engine_test.cpp
              LIBS trainer_engine TIMEOUT 60)
