// What the config tests share: a scratch folder fixture for YAML files, the shipped configs' paths,
// the one-line usage-error assertion, and validation of the defaults with overrides.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/config_loader.h"

namespace trainer {
namespace config_testing {

// A scratch folder for YAML files, removed at the end of the test.
class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "config_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string WriteFile(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
};

inline std::string Shipped(const std::string& name) {
  return std::string(TRAINER_SOURCE_DIR) + "/configs/" + name;
}

// Asserts a usage error whose message holds every one of `parts`.
inline void ExpectUsageError(const Status& status, const std::vector<std::string>& parts) {
  ASSERT_FALSE(status.ok()) << "expected an error holding: " << parts.front();
  EXPECT_EQ(status.code(), ExitCode::kUsage) << status.message();
  for (const std::string& part : parts)
    EXPECT_NE(status.message().find(part), std::string::npos)
        << "message: " << status.message() << "\nmissing: " << part;
  EXPECT_EQ(status.message().find('\n'), std::string::npos) << "one line: " << status.message();
}

// Defaults plus a training file, then `overrides`, validated for `world_size`.
inline Status ValidateWith(std::vector<std::string> overrides, int world_size) {
  overrides.insert(overrides.begin(), "Data.train_path=train.h5");
  StatusOr<TrainConfig> config = LoadConfig("", overrides);
  if (!config.ok()) return config.status();
  return ValidateConfig(&config.value(), world_size);
}

}  // namespace config_testing
}  // namespace trainer
