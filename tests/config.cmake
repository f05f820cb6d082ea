# Configuration tests: YAML loading, overrides, validation rules, FormatConfig round trip, and the
# shipped configs (read from the source tree).
trainer_gtest(config_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/config_test.cpp
                                  ${CMAKE_CURRENT_SOURCE_DIR}/unit/config_validate_test.cpp
                                  ${CMAKE_CURRENT_SOURCE_DIR}/unit/config_validate_moe_test.cpp
                                  ${CMAKE_CURRENT_SOURCE_DIR}/unit/config_diff_test.cpp
              LIBS trainer_config TIMEOUT 60)
target_compile_definitions(config_test PRIVATE TRAINER_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
