// The checkpoint's HDF5 chunks (CheckpointChunkShape, WriteTensor): at most ~1 Mi elements each,
// whole rows for 1-D and 2-D tensors as before, and for 3-D expert tensors a part of one expert's
// matrix, not whole experts (a {128, 3072, 4096} tensor in whole rows of its first dimension would
// be one 6.4 GB chunk, which HDF5 refuses); a 3-D tensor written through them reads back exactly.
#include "checkpoint/checkpoint_layout.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

namespace trainer {
namespace {

constexpr hsize_t kLimit = hsize_t{1} << 20;

hsize_t Elements(const std::vector<hsize_t>& v) {
  return std::accumulate(v.begin(), v.end(), hsize_t{1}, std::multiplies<hsize_t>());
}

TEST(CheckpointChunks, HoldAtMostAMebiElementInWholeRowsWhereOneFits) {
  // 1-D and 2-D: the rule of format_version 2 (whole rows, as many as fit).
  EXPECT_EQ(CheckpointChunkShape({50304}), (std::vector<hsize_t>{50304}));
  EXPECT_EQ(CheckpointChunkShape({3000000}), (std::vector<hsize_t>{kLimit}));
  EXPECT_EQ(CheckpointChunkShape({50304, 2048}), (std::vector<hsize_t>{512, 2048}));
  EXPECT_EQ(CheckpointChunkShape({7, 5}), (std::vector<hsize_t>{7, 5}));
  // 3-D experts: whole experts where they fit, else rows of one expert's matrix.
  EXPECT_EQ(CheckpointChunkShape({4, 64, 64}), (std::vector<hsize_t>{4, 64, 64}));
  EXPECT_EQ(CheckpointChunkShape({64, 2048, 2048}), (std::vector<hsize_t>{1, 512, 2048}));
  EXPECT_EQ(CheckpointChunkShape({128, 3072, 4096}), (std::vector<hsize_t>{1, 256, 4096}));
  EXPECT_EQ(CheckpointChunkShape({8, 28672, 4096}), (std::vector<hsize_t>{1, 256, 4096}));
  for (const std::vector<hsize_t>& dims :
       std::vector<std::vector<hsize_t>>{{60, 2816, 2048}, {128, 1536, 2048}, {3, 5000, 300}}) {
    const std::vector<hsize_t> chunk = CheckpointChunkShape(dims);
    EXPECT_LE(Elements(chunk), kLimit);
    for (size_t i = 0; i < dims.size(); ++i) EXPECT_LE(chunk[i], dims[i]);
  }
}

TEST(CheckpointChunks, AThreeDimensionalTensorWrittenInThemReadsBack) {
  const std::vector<int64_t> shape = {3, 1500, 1000};  // 1.5 M elements per expert
  std::vector<float> data(3 * 1500 * 1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i % 9973) * 0.5f;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("checkpoint_layout_test_" + std::to_string(getpid()) + ".h5"))
                               .string();
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const Status s = WriteTensor(file, "/model/experts", shape, data.data());
  ASSERT_TRUE(s.ok()) << s.message();
  hid_t dataset = H5Dopen2(file, "/model/experts", H5P_DEFAULT);
  hid_t plist = H5Dget_create_plist(dataset);
  std::vector<hsize_t> chunk(3);
  ASSERT_EQ(H5Pget_chunk(plist, 3, chunk.data()), 3);
  EXPECT_EQ(chunk, (std::vector<hsize_t>{1, 1048, 1000}));
  std::vector<float> back(data.size(), -1.f);
  ASSERT_GE(H5Dread(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()), 0);
  EXPECT_EQ(back, data);
  H5Pclose(plist);
  H5Dclose(dataset);
  H5Fclose(file);
  std::filesystem::remove(path);
}

// A tensor whose declared shape its stored bytes cannot hold (damage grew it to 2^40 rows): its
// shape is refused, so that no reader sizes a buffer by it; the written tensor's is taken.
TEST(CheckpointChunks, AShapeLargerThanTheBytesStoredIsRefused) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("checkpoint_shape_test_" + std::to_string(getpid()) + ".h5"))
                               .string();
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const std::vector<float> data(64 * 8, 1.f);
  ASSERT_TRUE(WriteTensor(file, "written", {8, 64}, data.data()).ok());
  hsize_t dims[2] = {hsize_t{1} << 40, 64}, chunk[2] = {8, 64};
  hid_t space = H5Screate_simple(2, dims, nullptr);
  hid_t props = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(props, 2, chunk);
  hid_t grown = H5Dcreate2(file, "grown", H5T_IEEE_F32LE, space, H5P_DEFAULT, props, H5P_DEFAULT);
  ASSERT_GE(grown, 0);
  H5Dclose(grown);
  H5Pclose(props);
  H5Sclose(space);
  std::vector<int64_t> shape;
  EXPECT_TRUE(DatasetShape(file, "written", &shape).ok());
  EXPECT_EQ(shape, (std::vector<int64_t>{8, 64}));
  const Status refused = DatasetShape(file, "grown", &shape);
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), ExitCode::kCheckpoint);
  EXPECT_NE(refused.message().find("checkpoint tensor /grown has shape [1099511627776, 64] and "
                                   "stores 0 of the 137438953472 chunks"),
            std::string::npos)
      << refused.message();
  H5Fclose(file);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace trainer
