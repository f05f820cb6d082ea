// A checkpoint directory's step folders in step order: the names' eight zero-padded digits grow
// to nine past step 99,999,999, where their text order is no longer the steps' (the newest would
// sort below step-99999999, and retention and --resume auto would take an older step).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"

namespace trainer {
namespace {

TEST(CheckpointFolders, NewestFirstByStepPastEightDigits) {
  char pattern[] = "/tmp/checkpoint_folders_XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  const std::vector<int64_t> steps = {99999990, 100000030, 7, 99999996, 100000024, 100000028};
  for (int64_t step : steps) {
    const std::string folder = dir + "/" + CheckpointFolderName(step);
    ASSERT_TRUE(std::filesystem::create_directory(folder));
    std::filesystem::create_directory(dir + "/" + CheckpointFolderName(step) + ".tmp");
  }
  EXPECT_EQ(CheckpointFolderName(100000030), "step-100000030");
  std::vector<int64_t> listed;
  for (const std::string& folder : CommittedCheckpoints(dir))
    listed.push_back(CheckpointFolderStep(folder));
  EXPECT_EQ(listed, (std::vector<int64_t>{100000030, 100000028, 100000024, 99999996, 99999990, 7}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trainer
