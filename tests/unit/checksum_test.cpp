// The checkpoint CRC-32 (zlib's crc32) against the standard check value, against a bit-at-a-time
// CRC-32 written here from the polynomial, and against a checkpoint written by the trainer before
// the CRC-32 came from zlib (tests/fixtures/README.md): it still verifies, and one changed stored
// CRC makes it fail.
#include "io/checksum.h"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"

namespace trainer {
namespace {

// The reflected IEEE 802.3 CRC-32 one bit at a time, as the polynomial defines it.
uint32_t BitwiseCrc32(const unsigned char* p, size_t n, uint32_t crc = 0) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
  }
  return ~crc;
}

const std::string kFixture =
    std::string(TRAINER_SOURCE_DIR) + "/tests/fixtures/checkpoint_v2_crc32.h5";

TEST(Checksum, GivesTheStandardCheckValue) {
  EXPECT_EQ(Crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(Crc32("", 0), 0u);
  EXPECT_EQ(Crc32(nullptr, 0, 0x12345678u), 0x12345678u);  // nothing added: the CRC so far
  EXPECT_EQ(Crc32("6789", 4, Crc32("12345", 5)), 0xCBF43926u);
  const float ones[2] = {1.0f, 1.0f};  // bytes 00 00 80 3f twice
  const unsigned char bytes[8] = {0, 0, 0x80, 0x3f, 0, 0, 0x80, 0x3f};
  EXPECT_EQ(TensorChecksum(ones, 2), BitwiseCrc32(bytes, 8));
}

TEST(Checksum, MatchesTheBitwiseCrcAtEveryLengthAndOffset) {
  std::mt19937 rng(7);
  std::vector<unsigned char> buffer(1 << 20);
  for (auto& b : buffer) b = static_cast<unsigned char>(rng());
  for (size_t offset = 0; offset < 8; ++offset)
    for (size_t n = 0; n < 80; ++n)
      ASSERT_EQ(Crc32(buffer.data() + offset, n), BitwiseCrc32(buffer.data() + offset, n))
          << "offset " << offset << ", " << n << " bytes";
  EXPECT_EQ(Crc32(buffer.data(), buffer.size()), BitwiseCrc32(buffer.data(), buffer.size()));
  const uint32_t first = Crc32(buffer.data(), 1000);
  EXPECT_EQ(Crc32(buffer.data() + 1000, buffer.size() - 1000, first),
            BitwiseCrc32(buffer.data(), buffer.size()));
}

TEST(Checksum, ACheckpointOfTheHandWrittenCrcStillVerifies) {
  const Status status = VerifyCheckpoint(kFixture);
  EXPECT_TRUE(status.ok()) << status.message();
}

TEST(Checksum, AChangedStoredCrcFailsVerification) {
  const std::string copy =
      std::string(::testing::TempDir()) + "/checksum_test_" + std::to_string(getpid()) + ".h5";
  std::filesystem::copy_file(kFixture, copy, std::filesystem::copy_options::overwrite_existing);
  const char* dataset = "/model/transformer.h.0.mlp.c_fc.weight";
  hid_t file = H5Fopen(copy.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t tensor = H5Dopen2(file, dataset, H5P_DEFAULT);
  ASSERT_GE(tensor, 0);
  hid_t attribute = H5Aopen(tensor, "crc32", H5P_DEFAULT);
  ASSERT_GE(attribute, 0);
  int64_t stored = 0;
  ASSERT_GE(H5Aread(attribute, H5T_NATIVE_INT64, &stored), 0);
  const int64_t changed = stored ^ 1;
  ASSERT_GE(H5Awrite(attribute, H5T_NATIVE_INT64, &changed), 0);
  H5Aclose(attribute);
  H5Dclose(tensor);
  H5Fclose(file);
  const Status status = VerifyCheckpoint(copy);
  std::filesystem::remove(copy);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("CRC-32"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("c_fc.weight"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace trainer
