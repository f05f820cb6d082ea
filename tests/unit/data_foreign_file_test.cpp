// Packed-token files written by other tools (h5py, h5repack), crafted here with the HDF5 C API:
// what HDF5 would read wrongly or not at all is refused on open (or on read) as a kData error
// naming the file, the dataset and the fix; what it reads as written opens and reads equal.
// - an attribute holding several values (h5py: f.attrs['vocab_size'] = np.array([...]));
// - a virtual /tokens whose source file is missing (read as zeros), and a complete one;
// - a /tokens compressed with a filter this HDF5 lacks (h5py's lzf);
// - /loss_mask values other than 0 and 1, a signed or 2-D /loss_mask;
// - a chunked /tokens whose writer stopped after its first chunk (the rest read as zeros);
// - a /doc_offsets declaring 2^40 entries (read into memory whole, it was a bad_alloc);
// - a signed /doc_offsets (numpy's int64) with a negative entry, which HDF5 read as 0.
#include <gtest/gtest.h>

#include "data/dataset.h"
#include "data/token_file_writer.h"
#include "data_test_util.h"

namespace trainer {
namespace {

using testing_data::DataTest;
using testing_data::SyntheticFile;
using testing_data::WriteSyntheticFile;

class ForeignFileTest : public DataTest {
 protected:
  // Opens `path` expecting a kData error that names the file and says `what`.
  void ExpectOpenFails(const std::string& path, const std::string& what,
                       const DatasetOpenOptions& options = {}) {
    auto opened = TokenDataset::Open(path, 1000, options);
    ASSERT_FALSE(opened.ok()) << path;
    EXPECT_EQ(opened.status().code(), ExitCode::kData) << opened.status().message();
    EXPECT_NE(opened.status().message().find(path), std::string::npos) << opened.status().message();
    EXPECT_NE(opened.status().message().find(what), std::string::npos) << opened.status().message();
  }

  // SyntheticFile's attributes and /doc_offsets for `n` tokens, and no /tokens: the caller's.
  hid_t CreateWithoutTokens(const std::string& path, size_t n) {
    SyntheticFile spec;
    spec.tokens.assign(n, 0);
    spec.write_tokens = false;
    WriteSyntheticFile(path, spec);
    return H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  }
};

std::vector<uint32_t> Counting(size_t n) {
  std::vector<uint32_t> tokens(n);
  for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<uint32_t>(i % 997);
  return tokens;
}

// A 1-D dataset `name` of `values` (uint16 in the file) in `file`.
void WriteUint16(hid_t file, const char* name, const std::vector<uint32_t>& values) {
  hsize_t n[1] = {values.size()};
  hid_t space = H5Screate_simple(1, n, nullptr);
  hid_t d = H5Dcreate2(file, name, H5T_STD_U16LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  ASSERT_GE(H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  H5Dclose(d);
  H5Sclose(space);
}

// A chunked /tokens of 1000 elements (chunks of 100) with the first chunk written only: what a
// writer killed part-way leaves; HDF5 reads the rest as zeros. Refused; written whole, it opens;
// and so does one whose writer set a fill value and left chunks out on purpose.
TEST_F(ForeignFileTest, TokensNotWrittenWholeAreRefused) {
  for (const char* mode : {"part", "whole", "filled"}) {
    const bool whole = std::string(mode) == "whole", filled = std::string(mode) == "filled";
    const std::string path = Path(std::string(mode) + ".h5");
    hid_t file = CreateWithoutTokens(path, 1000);
    ASSERT_GE(file, 0);
    hsize_t n[1] = {1000}, chunk[1] = {100}, first[1] = {0};
    hid_t space = H5Screate_simple(1, n, nullptr);
    hid_t props = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(props, 1, chunk);
    const uint16_t fill = 0;
    if (filled) H5Pset_fill_value(props, H5T_NATIVE_UINT16, &fill);
    hid_t d = H5Dcreate2(file, "tokens", H5T_STD_U16LE, space, H5P_DEFAULT, props, H5P_DEFAULT);
    ASSERT_GE(d, 0);
    const std::vector<uint32_t> tokens = Counting(1000);
    hid_t part = H5Screate_simple(1, whole ? n : chunk, nullptr);
    hid_t selection = H5Scopy(space);
    H5Sselect_hyperslab(selection, H5S_SELECT_SET, first, nullptr, whole ? n : chunk, nullptr);
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_UINT32, part, selection, H5P_DEFAULT, tokens.data()), 0);
    for (hid_t id : {selection, part, space}) H5Sclose(id);
    H5Pclose(props);
    H5Dclose(d);
    H5Fclose(file);
    if (std::string(mode) == "part") {
      ExpectOpenFails(path, "/tokens of " + path + " was not written whole (1 of the 10 chunks");
      continue;
    }
    auto opened = TokenDataset::Open(path, 1000, {});
    EXPECT_TRUE(opened.ok()) << mode << ": " << opened.status().message();
  }
}

// More documents than tokens (each holds at least its end of document): refused before a buffer
// of that length; one declaring 2^40 entries and holding none is refused as not written whole.
TEST_F(ForeignFileTest, DocOffsetsLongerThanTheTokensAreRefused) {
  for (const bool huge : {false, true}) {
    const std::string path = Path(huge ? "huge_offsets.h5" : "long_offsets.h5");
    SyntheticFile spec;
    spec.tokens = Counting(300);
    if (!huge) {  // 0, 0, 1, 1, ..., 299, 299, 300, 300: 401 entries, sorted, from 0 to 300
      for (uint64_t i = 0; i <= 300; ++i) spec.doc_offsets.insert(spec.doc_offsets.end(), {i, i});
      spec.doc_offsets.pop_back();
    }
    spec.write_doc_offsets = !huge;
    WriteSyntheticFile(path, spec);
    if (!huge) {
      ExpectOpenFails(path, "wrong /doc_offsets length (" + path + "): 600 documents for 300");
      continue;
    }
    hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    hsize_t n[1] = {hsize_t{1} << 40}, chunk[1] = {1024};
    hid_t space = H5Screate_simple(1, n, nullptr);
    hid_t props = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(props, 1, chunk);
    hid_t d =
        H5Dcreate2(file, "doc_offsets", H5T_STD_U64LE, space, H5P_DEFAULT, props, H5P_DEFAULT);
    ASSERT_GE(d, 0);
    H5Dclose(d);
    H5Pclose(props);
    H5Sclose(space);
    H5Fclose(file);
    ExpectOpenFails(path, "/doc_offsets of " + path + " was not written whole");
  }
}

// h5py writes numpy's int64 as it is: such offsets open and read as written; a negative entry,
// which HDF5 converts to uint64's nearest value (0: an empty document) unasked, is refused.
TEST_F(ForeignFileTest, SignedDocOffsetsOpenUnlessNegative) {
  for (const bool negative : {false, true}) {
    const std::string path = Path(negative ? "negative_offsets.h5" : "int64_offsets.h5");
    SyntheticFile spec;
    spec.tokens = Counting(300);
    spec.doc_offsets = {0, negative ? static_cast<uint64_t>(-7) : 100, 300};
    spec.doc_offsets_type = H5T_STD_I64LE;
    WriteSyntheticFile(path, spec);
    if (negative) {
      ExpectOpenFails(path, "cannot read /doc_offsets (" + path +
                                ", /doc_offsets[0:3]): it holds "
                                "a value its reader's type cannot (a negative number");
      continue;
    }
    auto opened = TokenDataset::Open(path, 1000, {});
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    EXPECT_EQ(opened.value()->num_documents(), 2);
  }
}

TEST_F(ForeignFileTest, AttributesHoldingSeveralValuesAreRefused) {
  for (const char* name : {"vocab_size", "eod_id", "tokenizer"}) {
    const std::string path = Path(std::string("array_") + name + ".h5");
    SyntheticFile spec;
    spec.tokens = Counting(300);
    spec.skip_attributes = {name};
    WriteSyntheticFile(path, spec);
    hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    hsize_t four[1] = {4};
    hid_t space = H5Screate_simple(1, four, nullptr);
    if (std::string(name) == "tokenizer") {  // four fixed-length strings
      hid_t type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, 6);
      hid_t a = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
      ASSERT_GE(H5Awrite(a, type, "bytes\0gpt2\0\0x\0\0\0\0\0y\0\0\0\0"), 0);
      H5Aclose(a);
      H5Tclose(type);
    } else {
      const int64_t values[4] = {999, 1, 2, 3};
      hid_t a = H5Acreate2(file, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
      ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT64, values), 0);
      H5Aclose(a);
    }
    H5Sclose(space);
    H5Fclose(file);
    ExpectOpenFails(path, std::string("wrong shape of attribute '") + name + "'");
    ExpectOpenFails(path, "4 values, expected one");
  }
}

TEST_F(ForeignFileTest, VirtualTokensNeedEverySource) {
  const std::vector<uint32_t> tokens = Counting(300);
  const std::vector<uint32_t> first(tokens.begin(), tokens.begin() + 120),
      second(tokens.begin() + 120, tokens.end());
  for (const auto& [part, values] : {std::pair{"part0.h5", first}, std::pair{"part1.h5", second}}) {
    hid_t file = H5Fcreate(Path(part).c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    WriteUint16(file, "t", values);
    H5Fclose(file);
  }
  // /tokens maps [0, 120) to part0.h5:/t and [120, 300) to part1.h5:/t (relative names: HDF5
  // finds them beside the file).
  const std::string path = Path("virtual.h5");
  hid_t file = CreateWithoutTokens(path, tokens.size());
  ASSERT_GE(file, 0);
  hsize_t total[1] = {tokens.size()};
  hid_t space = H5Screate_simple(1, total, nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  hsize_t start = 0;
  for (const auto& [part, count] : {std::pair<const char*, hsize_t>{"part0.h5", 120},
                                    std::pair<const char*, hsize_t>{"part1.h5", 180}}) {
    hid_t source = H5Screate_simple(1, &count, nullptr);
    H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
    ASSERT_GE(H5Pset_virtual(dcpl, space, part, "t", source), 0);
    H5Sclose(source);
    start += count;
  }
  H5Sselect_all(space);
  hid_t d = H5Dcreate2(file, "tokens", H5T_STD_U16LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(file);

  {  // complete: read as the parts hold them
    auto opened = TokenDataset::Open(path, 1000);
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    std::vector<int32_t> inputs(290), targets(290);
    ASSERT_TRUE((*opened)->ReadSamples({0}, 290, inputs.data(), targets.data()).ok());
    for (int t = 0; t < 290; ++t) ASSERT_EQ(inputs[t], static_cast<int32_t>(tokens[t])) << t;
  }

  std::filesystem::remove(Path("part1.h5"));  // HDF5 would read [120, 300) as zeros
  ExpectOpenFails(path, "cannot read /tokens (" + path +
                            "): it is a virtual dataset and its "
                            "source file part1.h5 is missing");
}

TEST_F(ForeignFileTest, AFilterThisHdf5LacksIsNamed) {
  // h5py's lzf (filter 32000) in the pipeline, optional so that HDF5 lets it be declared here,
  // and a chunk written raw as if the filter had been applied: reading it needs the filter.
  const std::string path = Path("lzf.h5");
  hid_t file = CreateWithoutTokens(path, 64);
  ASSERT_GE(file, 0);
  hsize_t n[1] = {64}, chunk[1] = {64};
  hid_t space = H5Screate_simple(1, n, nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, chunk);
  ASSERT_GE(H5Pset_filter(dcpl, 32000, H5Z_FLAG_OPTIONAL, 0, nullptr), 0);
  hid_t d = H5Dcreate2(file, "tokens", H5T_STD_U16LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  const std::vector<uint8_t> compressed(40, 7);
  hsize_t origin[1] = {0};
  ASSERT_GE(H5Dwrite_chunk(d, H5P_DEFAULT, 0, origin, compressed.size(), compressed.data()), 0);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(file);
  ExpectOpenFails(path, "cannot read /tokens (" + path +
                            ", /tokens[0:64]): it is compressed "
                            "with filter 32000");
  ExpectOpenFails(path, "Write it uncompressed or with gzip");
}

// /loss_mask written by `pack`'s writer with a value of 2, then by hand as int8 and as 2-D.
TEST_F(ForeignFileTest, MaskValuesOtherThanZeroAndOneAreRefused) {
  const std::string path = Path("mask2.h5");
  {
    auto writer = TokenFileWriter::Create(path, TokenFileInfo{257, 256, "bytes", true}, 16);
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    std::vector<uint32_t> tokens(40, 65);
    std::vector<uint8_t> mask(tokens.size(), 1);
    mask[29] = 2;
    ASSERT_TRUE((*writer)->Append(tokens.data(), tokens.size(), mask.data()).ok());
    ASSERT_TRUE((*writer)->AddDocumentStart(0).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  ExpectOpenFails(path, "loss mask value out of range (" + path +
                            ", /loss_mask[29]): 2, "
                            "expected 0 or 1");
  // A rank that does not scan the file finds it when it reads the sample.
  DatasetOpenOptions no_scan;
  no_scan.scan_tokens = false;
  auto opened = TokenDataset::Open(path, 257, no_scan);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  std::vector<int32_t> inputs(32), targets(32);
  Status read = (*opened)->ReadSamples({0}, 32, inputs.data(), targets.data());
  EXPECT_EQ(read.code(), ExitCode::kData);
  EXPECT_NE(read.message().find("/loss_mask[29]): 2"), std::string::npos) << read.message();

  for (const bool two_d : {false, true}) {
    const std::string other = Path(two_d ? "mask_2d.h5" : "mask_int8.h5");
    SyntheticFile spec;
    spec.tokens = Counting(40);
    WriteSyntheticFile(other, spec);
    hid_t file = H5Fopen(other.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hsize_t dims[2] = {two_d ? 20u : 40u, 2};
    hid_t space = H5Screate_simple(two_d ? 2 : 1, dims, nullptr);
    hid_t d = H5Dcreate2(file, "loss_mask", two_d ? H5T_STD_U8LE : H5T_STD_I8LE, space, H5P_DEFAULT,
                         H5P_DEFAULT, H5P_DEFAULT);
    const std::vector<int8_t> values(40, -1);
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_INT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
    H5Dclose(d);
    H5Sclose(space);
    H5Fclose(file);
    ExpectOpenFails(other, two_d ? "wrong /loss_mask shape (" + other + "): not 1-D"
                                 : "wrong /loss_mask type (" + other + "): int8, expected uint8");
    ExpectOpenFails(other, "data=mask.astype('uint8')");
  }
}

}  // namespace
}  // namespace trainer
