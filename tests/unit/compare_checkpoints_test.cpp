// tests/tools/compare_checkpoints against small hand-built HDF5 files (HDF5 C API): equal files
// pass; one differing integer root attribute (tokens_seen, consumed_samples, step, seed) fails;
// a rank's rng_states state fails where both files have as many ranks, its description does not,
// nor another world size; a changed tensor value still fails.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "io/hdf5_util.h"

namespace trainer {
namespace {

struct Manifest {
  int64_t step = 10, consumed_samples = 80, tokens_seen = 2560, seed = 1234, world_size = 2;
  std::string layout = "dp=2 tp=1 pp=1 ep=1";
  std::string rng_states = "rank 0 (dp 0/2): none\nrank 1 (dp 1/2): none\n";
  float value = 0.5f;
};

std::string WriteFile(const std::string& name, const Manifest& m) {
  const std::string path = ::testing::TempDir() + "/" + name + ".h5";
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(f, 0);
  const std::pair<const char*, int64_t> integers[] = {{"step", m.step},
                                                      {"consumed_samples", m.consumed_samples},
                                                      {"tokens_seen", m.tokens_seen},
                                                      {"seed", m.seed},
                                                      {"world_size", m.world_size}};
  for (const auto& [key, value] : integers) EXPECT_TRUE(Hdf5WriteIntAttribute(f, key, value).ok());
  EXPECT_TRUE(Hdf5WriteStringAttribute(f, "layout", m.layout).ok());
  EXPECT_TRUE(Hdf5WriteStringAttribute(f, "rng_state", "seed+consumed_samples").ok());
  EXPECT_TRUE(Hdf5WriteStringAttribute(f, "rng_states", m.rng_states).ok());
  const hid_t group = H5Gcreate2(f, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t dims[1] = {4};
  const hid_t space = H5Screate_simple(1, dims, nullptr);
  const hid_t d = H5Dcreate2(group, "w", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT,
                             H5P_DEFAULT);
  const std::vector<float> values = {1.f, -2.f, m.value, 3.f};
  EXPECT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  H5Dclose(d);
  H5Sclose(space);
  H5Gclose(group);
  H5Fclose(f);
  return path;
}

// compare_checkpoints' exit code for two files made from `a` and `b`, at tolerance 0.
int Compare(const Manifest& a, const Manifest& b) {
  const std::string command = std::string(COMPARE_CHECKPOINTS) + " " + WriteFile("a", a) + " " +
                              WriteFile("b", b) + " 0";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(CompareCheckpoints, EqualFilesPass) { EXPECT_EQ(Compare(Manifest(), Manifest()), 0); }

TEST(CompareCheckpoints, TensorValueFails) {
  Manifest b;
  b.value = 0.25f;
  EXPECT_EQ(Compare(Manifest(), b), 1);
}

TEST(CompareCheckpoints, EachTrainingStateAttributeFails) {
  for (int64_t Manifest::*field : {&Manifest::step, &Manifest::consumed_samples,
                                   &Manifest::tokens_seen, &Manifest::seed}) {
    Manifest b;
    b.*field += 1;
    EXPECT_EQ(Compare(Manifest(), b), 1);
  }
}

TEST(CompareCheckpoints, RngStatesOfOneLayoutMustMatch) {
  Manifest b;
  b.rng_states = "rank 0 (dp 0/2): philox 7\nrank 1 (dp 1/2): none\n";
  EXPECT_EQ(Compare(Manifest(), b), 1);
}

TEST(CompareCheckpoints, RankDescriptionsMayDiffer) {  // ZeRO-1 names each rank's shard
  Manifest b;
  b.rng_states = "rank 0 (dp 0/2 (sharding 0/2)): none\nrank 1 (dp 1/2 (sharding 1/2)): none\n";
  EXPECT_EQ(Compare(Manifest(), b), 0);
}

TEST(CompareCheckpoints, AnotherLayoutMayNameOtherRanks) {
  Manifest b;
  b.world_size = 1;
  b.layout = "dp=1 tp=1 pp=1 ep=1";
  b.rng_states = "rank 0 (dp 0/1): none\n";
  EXPECT_EQ(Compare(Manifest(), b), 0);
}

}  // namespace
}  // namespace trainer
