// Helpers for the data tests: a per-test temporary folder, plain file writers, and an independent
// HDF5 C API reader/writer of packed-token files (they do not use src/data, so the tests check the
// code under test against the HDF5 library itself).
#pragma once

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace trainer {
namespace testing_data {

// `n` token ids below `vocab`, drawn from `seed`.
inline std::vector<uint32_t> RandomFileTokens(size_t n, uint32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> tokens(n);
  for (uint32_t& t : tokens) t = rng() % vocab;
  return tokens;
}

// A fresh folder per test, removed afterwards.
class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("trainer_data_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
            std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  }
  std::fclose(f);
}

// Raw little-endian token file of `width` bytes per token (this machine is little-endian).
inline void WriteRawTokens(const std::string& path, const std::vector<uint32_t>& tokens,
                           int width) {
  std::string bytes;
  for (uint32_t t : tokens)
    for (int b = 0; b < width; ++b) bytes.push_back(static_cast<char>((t >> (8 * b)) & 0xff));
  WriteBytes(path, bytes);
}

inline bool FileExists(const std::string& path) {
  return std::filesystem::exists(path);
}

// ---- independent HDF5 reading ----

struct FileContents {
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> doc_offsets;
  size_t token_type_size = 0;
  bool token_type_unsigned = false;
  bool tokens_chunked = false;
  int64_t format_version = -1, vocab_size = -1, eod_id = -1;
  std::string tokenizer;
};

inline int64_t ReadIntAttr(hid_t file, const char* name) {
  int64_t value = -1;
  hid_t a = H5Aopen(file, name, H5P_DEFAULT);
  EXPECT_GE(a, 0) << name;
  if (a < 0) return value;
  EXPECT_GE(H5Aread(a, H5T_NATIVE_INT64, &value), 0);
  H5Aclose(a);
  return value;
}

inline std::string ReadVarStringAttr(hid_t file, const char* name) {
  hid_t a = H5Aopen(file, name, H5P_DEFAULT);
  EXPECT_GE(a, 0) << name;
  if (a < 0) return "";
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);  // what h5py writes for str
  char* text = nullptr;
  EXPECT_GE(H5Aread(a, t, &text), 0);
  std::string value = text ? text : "";
  H5free_memory(text);
  H5Tclose(t);
  H5Aclose(a);
  return value;
}

inline FileContents ReadPackedFile(const std::string& path) {
  FileContents c;
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(file, 0) << path;
  if (file < 0) return c;
  hid_t tokens = H5Dopen2(file, "tokens", H5P_DEFAULT);
  hid_t type = H5Dget_type(tokens);
  c.token_type_size = H5Tget_size(type);
  c.token_type_unsigned = H5Tget_sign(type) == H5T_SGN_NONE;
  H5Tclose(type);
  hid_t dcpl = H5Dget_create_plist(tokens);
  c.tokens_chunked = H5Pget_layout(dcpl) == H5D_CHUNKED;
  H5Pclose(dcpl);
  hid_t space = H5Dget_space(tokens);
  c.tokens.resize(static_cast<size_t>(H5Sget_simple_extent_npoints(space)));
  H5Sclose(space);
  if (!c.tokens.empty()) {
    EXPECT_GE(H5Dread(tokens, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, c.tokens.data()),
              0);
  }
  H5Dclose(tokens);
  hid_t offsets = H5Dopen2(file, "doc_offsets", H5P_DEFAULT);
  space = H5Dget_space(offsets);
  c.doc_offsets.resize(static_cast<size_t>(H5Sget_simple_extent_npoints(space)));
  H5Sclose(space);
  EXPECT_GE(
      H5Dread(offsets, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, c.doc_offsets.data()), 0);
  H5Dclose(offsets);
  c.format_version = ReadIntAttr(file, "format_version");
  c.vocab_size = ReadIntAttr(file, "vocab_size");
  c.eod_id = ReadIntAttr(file, "eod_id");
  c.tokenizer = ReadVarStringAttr(file, "tokenizer");
  H5Fclose(file);
  return c;
}

// ---- independent HDF5 writing of (possibly broken) token files ----

struct SyntheticFile {
  std::vector<uint32_t> tokens;
  hid_t token_type = H5T_STD_U16LE;   // stored type of /tokens
  std::vector<uint64_t> doc_offsets;  // empty: {0, tokens.size()}
  hid_t doc_offsets_type = H5T_STD_U64LE;  // signed: the entries' bits written as int64
  bool write_tokens = true;
  bool write_doc_offsets = true;
  int64_t format_version = 1;
  int64_t vocab_size = 1000;
  int64_t eod_id = 999;
  std::string tokenizer = "synthetic";
  std::vector<std::string> skip_attributes;  // attribute names to leave out
};

inline void WriteSyntheticFile(const std::string& path, const SyntheticFile& spec) {
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  if (spec.write_tokens) {
    hsize_t n[1] = {spec.tokens.size()};
    hsize_t chunk[1] = {64};
    hsize_t max_dims[1] = {H5S_UNLIMITED};
    hid_t space = H5Screate_simple(1, n, max_dims);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, chunk);
    hid_t d = H5Dcreate2(file, "tokens", spec.token_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(d, 0);
    if (!spec.tokens.empty()) {
      ASSERT_GE(H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, spec.tokens.data()),
                0);
    }
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
  }
  if (spec.write_doc_offsets) {
    std::vector<uint64_t> offsets = spec.doc_offsets;
    if (offsets.empty()) offsets = {0, spec.tokens.size()};
    hsize_t n[1] = {offsets.size()};
    hid_t space = H5Screate_simple(1, n, nullptr);
    hid_t d = H5Dcreate2(file, "doc_offsets", spec.doc_offsets_type, space, H5P_DEFAULT,
                         H5P_DEFAULT, H5P_DEFAULT);
    const bool is_signed = H5Tget_sign(spec.doc_offsets_type) == H5T_SGN_2;
    ASSERT_GE(H5Dwrite(d, is_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL,
                       H5P_DEFAULT, offsets.data()),
              0);
    H5Dclose(d);
    H5Sclose(space);
  }
  auto skipped = [&](const char* name) {
    for (const std::string& s : spec.skip_attributes)
      if (s == name) return true;
    return false;
  };
  hid_t scalar = H5Screate(H5S_SCALAR);
  const std::pair<const char*, int64_t> ints[] = {{"format_version", spec.format_version},
                                                  {"vocab_size", spec.vocab_size},
                                                  {"eod_id", spec.eod_id}};
  for (const auto& [name, value] : ints) {
    if (skipped(name)) continue;
    hid_t a = H5Acreate2(file, name, H5T_STD_I32LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    int32_t v = static_cast<int32_t>(value);
    H5Awrite(a, H5T_NATIVE_INT32, &v);
    H5Aclose(a);
  }
  if (!skipped("tokenizer")) {  // a fixed-length string, as some writers produce
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, spec.tokenizer.size() + 1);
    hid_t a = H5Acreate2(file, "tokenizer", t, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, spec.tokenizer.c_str());
    H5Aclose(a);
    H5Tclose(t);
  }
  H5Sclose(scalar);
  H5Fclose(file);
}

}  // namespace testing_data
}  // namespace trainer
