// `trainer pack` streams: packing a 24 MiB generated input must not grow peak memory by more
// than 64 MiB (holding the corpus as tokens would take ~96 MiB). Its own executable, so the peak
// RSS before packing is this test's alone.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>

#include "data/packer.h"
#include "data_test_util.h"

namespace trainer {
namespace {

using testing_data::DataTest;

// The generated corpus: byte p is a fixed function of p.
unsigned char CorpusByte(uint64_t p) {
  return static_cast<unsigned char>(((p * 2654435761ULL) >> 7) ^ (p >> 3));
}

int64_t PeakRssBytes() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

class PackMemoryTest : public DataTest {};

TEST_F(PackMemoryTest, PeakMemoryDoesNotGrowWithCorpus) {
  const uint64_t size = uint64_t{24} << 20;
  {
    std::vector<unsigned char> block(1 << 20);
    FILE* f = std::fopen(Path("corpus.txt").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    for (uint64_t base = 0; base < size; base += block.size()) {
      for (size_t i = 0; i < block.size(); ++i) block[i] = CorpusByte(base + i);
      ASSERT_EQ(std::fwrite(block.data(), 1, block.size(), f), block.size());
    }
    std::fclose(f);
  }
  PackOptions options;
  options.inputs = {Path("corpus.txt")};
  options.output = Path("corpus.h5");
  options.val_fraction = 0.05;
  const int64_t before = PeakRssBytes();
  PackSummary summary;
  Status status = PackDataset(options, &summary);
  const int64_t growth = PeakRssBytes() - before;
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_LT(growth, int64_t{64} << 20) << "peak RSS grew by " << (growth >> 20) << " MiB";
  EXPECT_EQ(summary.tokens, static_cast<int64_t>(size) + 1);

  // Spot-check positions of both files against the generator (train, then validation).
  const int64_t train_tokens = summary.files.at(0).tokens;
  EXPECT_EQ(train_tokens, static_cast<int64_t>(size + 1) - std::llround(0.05 * (size + 1)));
  hid_t file = H5Fopen(Path("corpus.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t val_file = H5Fopen(Path("corpus.val.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  ASSERT_GE(val_file, 0);
  hid_t tokens = H5Dopen2(file, "tokens", H5P_DEFAULT);
  hid_t val_tokens = H5Dopen2(val_file, "tokens", H5P_DEFAULT);
  for (uint64_t p : {uint64_t{0}, uint64_t{12345}, uint64_t{1} << 20, (uint64_t{1} << 20) - 1,
                     uint64_t(train_tokens - 1), uint64_t(train_tokens), size - 1, size}) {
    bool in_train = static_cast<int64_t>(p) < train_tokens;
    hid_t dataset = in_train ? tokens : val_tokens;
    hsize_t start[1] = {in_train ? p : p - train_tokens}, count[1] = {1};
    hid_t space = H5Dget_space(dataset);
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
    hid_t memory = H5Screate_simple(1, count, nullptr);
    uint32_t token = 0;
    ASSERT_GE(H5Dread(dataset, H5T_NATIVE_UINT32, memory, space, H5P_DEFAULT, &token), 0);
    EXPECT_EQ(token, p == size ? 256u : CorpusByte(p)) << "position " << p;
    H5Sclose(memory);
    H5Sclose(space);
  }
  H5Dclose(tokens);
  H5Dclose(val_tokens);
  H5Fclose(file);
  H5Fclose(val_file);
}

}  // namespace
}  // namespace trainer
