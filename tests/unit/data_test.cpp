// Tests of the dataset reader (src/data/dataset.h, data_sources.h): samples read by hyperslab
// equal the file's slices (checked against files written here with the HDF5 C API), every bad
// file is a kData error naming the file, and the train/validation splits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <random>

#include "data/data_sources.h"
#include "data/dataset.h"
#include "data_test_util.h"
#include "io/hdf5_util.h"

namespace trainer {
namespace {

using testing_data::DataTest;
using testing_data::RandomFileTokens;
using testing_data::SyntheticFile;
using testing_data::WriteBytes;
using testing_data::WriteSyntheticFile;

// Reads `ids` and checks every row against tokens[id*T : id*T+T+1] of `tokens` (offset by first).
void ExpectSamplesMatch(TokenDataset& dataset, const std::vector<uint32_t>& tokens,
                        const std::vector<int64_t>& ids, int T, int64_t first = 0) {
  std::vector<int32_t> inputs(ids.size() * T, -1), targets(ids.size() * T, -1);
  Status status = first == 0 ? dataset.ReadSamples(ids, T, inputs.data(), targets.data())
                             : dataset.ReadSamples(DataSplit{first, 1 << 30}, ids, T, inputs.data(),
                                                   targets.data());
  ASSERT_TRUE(status.ok()) << status.message();
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int t = 0; t < T; ++t) {
      size_t pos = static_cast<size_t>((first + ids[r]) * T + t);
      ASSERT_EQ(inputs[r * T + t], static_cast<int32_t>(tokens[pos])) << "row " << r << " t " << t;
      ASSERT_EQ(targets[r * T + t], static_cast<int32_t>(tokens[pos + 1]))
          << "row " << r << " t " << t;
    }
  }
}

class DatasetTest : public DataTest {
 protected:
  // Opens `path` expecting a kData error that names the file and mentions `what`.
  void ExpectOpenFails(const std::string& path, const std::string& what, int64_t model_vocab = 0) {
    auto opened = TokenDataset::Open(path, model_vocab);
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(opened.status().code(), ExitCode::kData) << opened.status().message();
    EXPECT_NE(opened.status().message().find(path), std::string::npos) << opened.status().message();
    EXPECT_NE(opened.status().message().find(what), std::string::npos) << opened.status().message();
  }
};

TEST_F(DatasetTest, ReadSamplesEqualFileSlicesUint16) {
  const int T = 16;
  SyntheticFile spec;
  spec.tokens = RandomFileTokens(50 * T + 1 + 7, 1000, 1);  // 50 samples and a few spare tokens
  WriteSyntheticFile(Path("d.h5"), spec);
  auto opened = TokenDataset::Open(Path("d.h5"), 1024);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  TokenDataset& dataset = **opened;
  EXPECT_EQ(dataset.num_tokens(), static_cast<int64_t>(spec.tokens.size()));
  EXPECT_EQ(dataset.token_bytes(), 2);
  EXPECT_EQ(dataset.vocab_size(), 1000);
  EXPECT_EQ(dataset.eod_id(), 999);
  EXPECT_EQ(dataset.tokenizer(), "synthetic");
  EXPECT_EQ(dataset.num_documents(), 1);
  EXPECT_TRUE(dataset.fully_scanned());
  EXPECT_EQ(dataset.NumSamples(T), 50);
  for (int t : {1, 2, 7, 100, 807, 808, 809}) {
    EXPECT_EQ(dataset.NumSamples(t), (static_cast<int64_t>(spec.tokens.size()) - 1) / t) << t;
  }
  // Runs of consecutive ids (merged reads), repeats, the first and the last sample.
  ExpectSamplesMatch(dataset, spec.tokens, {3, 4, 5, 10, 0, 49, 7, 7, 48, 49}, T);
  ExpectSamplesMatch(dataset, spec.tokens, {49}, T);
  ExpectSamplesMatch(dataset, spec.tokens, {5, 6}, T, /*first=*/40);
}

// Data.shift_windows: each window starts `shift` tokens past its fixed place, checked against
// the file's tokens; runs of consecutive ids with one shift are one read, and the split's last
// sample stays unshifted (its shifted window would run past the split).
TEST_F(DatasetTest, ShiftedWindowsEqualFileSlices) {
  const int T = 8;
  SyntheticFile spec;
  spec.tokens = RandomFileTokens(20 * T + 1, 1000, 3);  // exactly 20 samples: no spare token
  WriteSyntheticFile(Path("d.h5"), spec);
  auto opened = TokenDataset::Open(Path("d.h5"), 1024);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  const DataSplit split{4, 10};  // file samples 4..13
  const std::vector<int64_t> ids = {0, 1, 2, 9, 5, 6, 9, 3};
  const std::vector<int64_t> shifts = {3, 3, 5, 7, 0, 7, 2, 1};
  std::vector<int32_t> inputs(ids.size() * T, -1), targets(ids.size() * T, -1);
  Status status =
      (*opened)->ReadSamples(split, ids, T, inputs.data(), targets.data(), shifts.data());
  ASSERT_TRUE(status.ok()) << status.message();
  for (size_t r = 0; r < ids.size(); ++r) {
    const int64_t shift = ids[r] == split.num_samples - 1 ? 0 : shifts[r];
    for (int t = 0; t < T; ++t) {
      const size_t pos = static_cast<size_t>((split.first_sample + ids[r]) * T + shift + t);
      ASSERT_EQ(inputs[r * T + t], static_cast<int32_t>(spec.tokens[pos])) << r << " " << t;
      ASSERT_EQ(targets[r * T + t], static_cast<int32_t>(spec.tokens[pos + 1])) << r << " " << t;
    }
  }
  // The file's last sample (a split to the end) reads within the file whatever its shift.
  std::vector<int64_t> last = {19}, big = {T - 1};
  status = (*opened)->ReadSamples(DataSplit{0, 20}, last, T, inputs.data(), targets.data(),
                                  big.data());
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(targets[T - 1], static_cast<int32_t>(spec.tokens[20 * T]));
}

TEST_F(DatasetTest, ReadSamplesEqualFileSlicesUint32) {
  const int T = 5;
  SyntheticFile spec;
  spec.token_type = H5T_STD_U32LE;
  spec.vocab_size = 100000;
  spec.eod_id = 0;
  spec.tokens = RandomFileTokens(101, 100000, 2);
  WriteSyntheticFile(Path("d.h5"), spec);
  auto opened = TokenDataset::Open(Path("d.h5"), 100000);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  EXPECT_EQ((*opened)->token_bytes(), 4);
  ExpectSamplesMatch(**opened, spec.tokens, {19, 0, 1, 2, 18}, T);
}

TEST_F(DatasetTest, OutOfRangeSampleIdIsAnError) {
  SyntheticFile spec;
  spec.tokens = RandomFileTokens(41, 1000, 3);
  WriteSyntheticFile(Path("d.h5"), spec);
  auto opened = TokenDataset::Open(Path("d.h5"), 0);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  std::vector<int32_t> in(8), out(8);
  EXPECT_FALSE((*opened)->ReadSamples({5}, 8, in.data(), out.data()).ok());  // 5 samples: 0..4
  EXPECT_TRUE((*opened)->ReadSamples({4}, 8, in.data(), out.data()).ok());
  EXPECT_FALSE((*opened)->ReadSamples({-1}, 8, in.data(), out.data()).ok());
  EXPECT_FALSE((*opened)->ReadSamples(DataSplit{2, 2}, {2}, 8, in.data(), out.data()).ok());
}

// A file truncated in place during a run: the next read is a data error naming it (HDF5 read
// zeros past the new end, and training went on them); a file replaced by another one (pack's
// rename) reads on as opened.
TEST_F(DatasetTest, TruncatedWhileOpenIsAnError) {
  const int T = 16;
  SyntheticFile spec;
  spec.tokens = RandomFileTokens(4000 * T + 1, 1000, 5);
  WriteSyntheticFile(Path("d.h5"), spec);
  WriteSyntheticFile(Path("other.h5"), spec);
  auto opened = TokenDataset::Open(Path("d.h5"), 1024);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  ExpectSamplesMatch(**opened, spec.tokens, {3999}, T);
  ASSERT_EQ(rename(Path("other.h5").c_str(), Path("d.h5").c_str()), 0);  // replaced: reads on
  ExpectSamplesMatch(**opened, spec.tokens, {3999}, T);
  auto reopened = TokenDataset::Open(Path("d.h5"), 1024);
  ASSERT_TRUE(reopened.ok()) << reopened.status().message();
  ASSERT_EQ(truncate(Path("d.h5").c_str(), 20000), 0);
  std::vector<int32_t> in(T), out(T);
  const Status status = (*reopened)->ReadSamples({3999}, T, in.data(), out.data());
  EXPECT_EQ(status.code(), ExitCode::kData) << status.message();
  EXPECT_NE(status.message().find("dataset file truncated during the run (" + Path("d.h5") + ": "),
            std::string::npos)
      << status.message();
}

// A file cut short before the run (a copy that stopped): HDF5's own reason, not "unknown HDF5
// error" (the clean-up after the failed open cleared HDF5's error stack).
TEST_F(DatasetTest, TruncatedFileSaysSo) {
  SyntheticFile spec;
  spec.tokens = RandomFileTokens(4000, 1000, 6);
  WriteSyntheticFile(Path("cut.h5"), spec);
  ASSERT_EQ(truncate(Path("cut.h5").c_str(), 3000), 0);
  ExpectOpenFails(Path("cut.h5"), "truncated");
}

TEST_F(DatasetTest, MissingFile) {
  ExpectOpenFails(Path("nope.h5"), "not found");
}

TEST_F(DatasetTest, NotAnHdf5File) {
  WriteBytes(Path("text.h5"), "just some text, not HDF5\n");
  ExpectOpenFails(Path("text.h5"), "not an HDF5 file");
}

TEST_F(DatasetTest, MissingTokens) {
  SyntheticFile spec;
  spec.write_tokens = false;
  spec.doc_offsets = {0, 10};
  WriteSyntheticFile(Path("d.h5"), spec);
  ExpectOpenFails(Path("d.h5"), "/tokens");
}

TEST_F(DatasetTest, MissingDocOffsets) {
  SyntheticFile spec;
  spec.tokens = RandomFileTokens(10, 1000, 4);
  spec.write_doc_offsets = false;
  WriteSyntheticFile(Path("d.h5"), spec);
  ExpectOpenFails(Path("d.h5"), "/doc_offsets");
}

TEST_F(DatasetTest, WrongTokenTypes) {
  const std::pair<hid_t, const char*> wrong[] = {{H5T_STD_I32LE, "int32"},
                                                 {H5T_IEEE_F32LE, "float32"},
                                                 {H5T_STD_U8LE, "uint8"},
                                                 {H5T_STD_U64LE, "uint64"}};
  for (const auto& [type, name] : wrong) {
    SyntheticFile spec;
    spec.tokens = RandomFileTokens(10, 100, 5);
    spec.token_type = type;
    std::string path = Path(std::string("d_") + name + ".h5");
    WriteSyntheticFile(path, spec);
    ExpectOpenFails(path, std::string("wrong token type"));
    ExpectOpenFails(path, name);
  }
}

TEST_F(DatasetTest, MissingAttributes) {
  for (const char* attribute : {"format_version", "vocab_size", "eod_id", "tokenizer"}) {
    SyntheticFile spec;
    spec.tokens = RandomFileTokens(10, 1000, 6);
    spec.skip_attributes = {attribute};
    std::string path = Path(std::string("no_") + attribute + ".h5");
    WriteSyntheticFile(path, spec);
    ExpectOpenFails(path, std::string("'") + attribute + "'");
  }
}

TEST_F(DatasetTest, VocabularyLargerThanModel) {
  SyntheticFile spec;
  spec.tokens = RandomFileTokens(10, 1000, 7);
  WriteSyntheticFile(Path("d.h5"), spec);
  ExpectOpenFails(Path("d.h5"), "Model.vocab_size", /*model_vocab=*/999);
  EXPECT_TRUE(TokenDataset::Open(Path("d.h5"), 1000).ok());
}

TEST_F(DatasetTest, TokenOutOfVocabulary) {
  SyntheticFile spec;
  spec.tokens = RandomFileTokens(300, 1000, 8);
  spec.tokens[123] = 1000;  // == vocab_size
  WriteSyntheticFile(Path("d.h5"), spec);
  ExpectOpenFails(Path("d.h5"), "/tokens[123]");
}

TEST_F(DatasetTest, LargeFilesScanOnlyTheirEndsAndReadsStillCheck) {
  SyntheticFile spec;
  spec.tokens = RandomFileTokens(400, 1000, 9);
  spec.tokens[200] = 4000;  // in the middle: not scanned in large-file mode
  WriteSyntheticFile(Path("d.h5"), spec);
  DatasetOpenOptions large;
  large.full_scan_max_bytes = 0;  // treat as large
  large.scan_chunk_tokens = 50;
  auto opened = TokenDataset::Open(Path("d.h5"), 1000, large);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  EXPECT_FALSE((*opened)->fully_scanned());
  std::vector<int32_t> in(10), out(10);
  EXPECT_TRUE((*opened)->ReadSamples({0}, 10, in.data(), out.data()).ok());
  Status bad = (*opened)->ReadSamples({20}, 10, in.data(), out.data());  // tokens 200..210
  EXPECT_EQ(bad.code(), ExitCode::kData);
  EXPECT_NE(bad.message().find(Path("d.h5")), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("/tokens[200]"), std::string::npos) << bad.message();
  // A bad token in the last chunk is found on open.
  spec.tokens[200] = 1;
  spec.tokens[390] = 1000;
  WriteSyntheticFile(Path("e.h5"), spec);
  auto last = TokenDataset::Open(Path("e.h5"), 1000, large);
  ASSERT_FALSE(last.ok());
  EXPECT_EQ(last.status().code(), ExitCode::kData);
  // Without the scan (ranks other than the validating one) the file opens; reads still check.
  DatasetOpenOptions no_scan;
  no_scan.scan_tokens = false;
  auto unscanned = TokenDataset::Open(Path("e.h5"), 1000, no_scan);
  ASSERT_TRUE(unscanned.ok()) << unscanned.status().message();
  EXPECT_FALSE((*unscanned)->fully_scanned());
  EXPECT_EQ((*unscanned)->ReadSamples({38}, 10, in.data(), out.data()).code(), ExitCode::kData);
}

TEST_F(DatasetTest, TooShortForOneSample) {
  SyntheticFile spec;
  spec.tokens = RandomFileTokens(64, 1000, 10);
  WriteSyntheticFile(Path("d.h5"), spec);
  auto opened = TokenDataset::Open(Path("d.h5"), 1000);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  EXPECT_EQ((*opened)->NumSamples(64), 0);  // 64 tokens: no sample of 64+1
  EXPECT_EQ((*opened)->NumSamples(63), 1);
  Status short_status = (*opened)->RequireSamples(64, 1, "Data.train_path");
  EXPECT_EQ(short_status.code(), ExitCode::kData);
  EXPECT_NE(short_status.message().find(Path("d.h5")), std::string::npos);
  EXPECT_NE(short_status.message().find("Data.train_path"), std::string::npos);
  EXPECT_TRUE((*opened)->RequireSamples(63, 1, "Data.train_path").ok());
}

TEST_F(DatasetTest, EmptyTokens) {
  SyntheticFile spec;
  WriteSyntheticFile(Path("d.h5"), spec);
  ExpectOpenFails(Path("d.h5"), "empty dataset");
}

TEST_F(DatasetTest, InconsistentDocOffsetsAndVersion) {
  SyntheticFile spec;
  spec.tokens = RandomFileTokens(10, 1000, 11);
  spec.doc_offsets = {0, 4, 9};  // does not end at 10
  WriteSyntheticFile(Path("offsets.h5"), spec);
  ExpectOpenFails(Path("offsets.h5"), "/doc_offsets");
  spec.doc_offsets = {0, 6, 4, 10};  // not sorted
  WriteSyntheticFile(Path("unsorted.h5"), spec);
  ExpectOpenFails(Path("unsorted.h5"), "/doc_offsets");
  spec.doc_offsets = {};
  spec.format_version = 2;
  WriteSyntheticFile(Path("version.h5"), spec);
  ExpectOpenFails(Path("version.h5"), "format_version");
}

TEST_F(DatasetTest, Hdf5CheckReportsTheCallAndHdf5sReason) {
  SyntheticFile spec;
  spec.tokens = RandomFileTokens(10, 1000, 12);
  WriteSyntheticFile(Path("d.h5"), spec);
  hid_t file = H5Fopen(Path("d.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  auto open_missing = [&]() -> Status {
    Hdf5Handle dataset;
    HDF5_CHECK(dataset.Reset(H5Dopen2(file, "no_such_dataset", H5P_DEFAULT), H5Dclose));
    return Status::Ok();
  };
  Status status = open_missing();
  H5Fclose(file);
  EXPECT_EQ(status.code(), ExitCode::kRuntime);
  EXPECT_NE(status.message().find("HDF5 call failed"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("H5Dopen2"), std::string::npos) << status.message();
  EXPECT_EQ(status.message().find('\n'), std::string::npos) << status.message();
}

TEST(DataSplitTest, HoldOutTheLastFloorFraction) {
  auto splits = HoldOutValidation("f.h5", 100, 0.1);
  ASSERT_TRUE(splits.ok());
  EXPECT_EQ(splits->train.first_sample, 0);
  EXPECT_EQ(splits->train.num_samples, 90);
  EXPECT_EQ(splits->val.first_sample, 90);
  EXPECT_EQ(splits->val.num_samples, 10);
  splits = HoldOutValidation("f.h5", 109, 0.1);  // floor(10.9) = 10
  ASSERT_TRUE(splits.ok());
  EXPECT_EQ(splits->val.num_samples, 10);
  EXPECT_EQ(splits->train.num_samples, 99);
  splits = HoldOutValidation("f.h5", 5, 0.01);  // at least one
  ASSERT_TRUE(splits.ok());
  EXPECT_EQ(splits->val.num_samples, 1);
  EXPECT_EQ(splits->val.first_sample, 4);
  splits = HoldOutValidation("f.h5", 5, 0.0);
  ASSERT_TRUE(splits.ok());
  EXPECT_EQ(splits->val.num_samples, 0);
  EXPECT_EQ(splits->train.num_samples, 5);
  splits = HoldOutValidation("f.h5", 1, 0.5);
  ASSERT_FALSE(splits.ok());
  EXPECT_EQ(splits.status().code(), ExitCode::kData);
  EXPECT_NE(splits.status().message().find("f.h5"), std::string::npos);
}

TEST_F(DatasetTest, OpenDataSourcesPicksFilesAndSplits) {
  SyntheticFile spec;
  spec.tokens = RandomFileTokens(101, 1000, 13);  // 10 samples of 10
  WriteSyntheticFile(Path("train.h5"), spec);
  spec.tokens.resize(31);  // 3 samples of 10
  WriteSyntheticFile(Path("val.h5"), spec);
  spec.tokens.resize(5);
  WriteSyntheticFile(Path("tiny.h5"), spec);

  DataConfig data;
  data.train_path = Path("train.h5");
  data.val_fraction = 0.2;
  auto held_out = OpenDataSources(data, 1000, 10);
  ASSERT_TRUE(held_out.ok()) << held_out.status().message();
  EXPECT_EQ(held_out->train.num_samples(), 8);
  ASSERT_EQ(held_out->val.parts().size(), 1u);
  EXPECT_EQ(held_out->val.parts()[0].split.first_sample, 8);
  EXPECT_EQ(held_out->val.num_samples(), 2);
  EXPECT_EQ(held_out->val.parts()[0].file, held_out->train_files[0]);

  data.val_path = Path("val.h5");
  auto separate = OpenDataSources(data, 1000, 10);
  ASSERT_TRUE(separate.ok()) << separate.status().message();
  EXPECT_EQ(separate->train.num_samples(), 10);
  EXPECT_EQ(separate->val.num_samples(), 3);
  EXPECT_EQ(separate->val.Describe(), Path("val.h5"));

  data.val_path.clear();
  data.val_fraction = 0.0;
  auto none = OpenDataSources(data, 1000, 10);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->val.num_samples(), 0);
  EXPECT_EQ(none->train.num_samples(), 10);

  data.val_path = Path("tiny.h5");
  auto tiny = OpenDataSources(data, 1000, 10);
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(tiny.status().code(), ExitCode::kData);
  EXPECT_NE(tiny.status().message().find("Data.val_path"), std::string::npos);
  EXPECT_NE(tiny.status().message().find(Path("tiny.h5")), std::string::npos);

  DataConfig missing;
  EXPECT_EQ(OpenDataSources(missing, 1000, 10).status().code(), ExitCode::kUsage);
}

// A training glob that also matches a validation file (pack's shard-00000.val.h5 under
// shard-*.h5), or the same file by another name, is refused: it would be trained on.
TEST_F(DatasetTest, TrainingFilesMustNotBeValidationFiles) {
  SyntheticFile spec;
  spec.tokens = RandomFileTokens(101, 1000, 13);
  WriteSyntheticFile(Path("shard-00000.h5"), spec);
  WriteSyntheticFile(Path("shard-00000.val.h5"), spec);
  WriteSyntheticFile(Path("val-00000.h5"), spec);
  DataConfig data;
  data.train_path = Path("shard-*.h5");
  data.val_path = Path("shard-00000.val.h5");
  auto overlap = OpenDataSources(data, 1000, 10);
  ASSERT_FALSE(overlap.ok());
  EXPECT_EQ(overlap.status().code(), ExitCode::kData);
  EXPECT_NE(overlap.status().message().find("training file is also a validation file (" +
                                            Path("shard-00000.val.h5") + ", Data.train_path"),
            std::string::npos)
      << overlap.status().message();
  data.train_path = Path("shard-00000.h5");
  data.val_path = Path(".") + "/./shard-00000.h5";  // the same file, another spelling
  EXPECT_EQ(OpenDataSources(data, 1000, 10).status().code(), ExitCode::kData);
  data.train_path = Path("shard-*.h5");  // no overlap with a validation file named apart
  std::filesystem::remove(Path("shard-00000.val.h5"));
  data.val_path = Path("val-*.h5");
  auto apart = OpenDataSources(data, 1000, 10);
  ASSERT_TRUE(apart.ok()) << apart.status().message();
  EXPECT_EQ(apart->train.num_samples(), apart->val.num_samples());
}

// Several files: the set's sample k is file A's k-th, then file B's; each read equals the file's
// own read of that sample; a held-out part spans the files' boundary; globs and comma lists.
TEST_F(DatasetTest, SeveralFilesFormOneSampleSet) {
  const int T = 10;
  SyntheticFile a, b;
  a.tokens = RandomFileTokens(4 * T + 1 + 3, 1000, 21);  // 4 samples
  b.tokens = RandomFileTokens(6 * T + 1, 1000, 22);      // 6 samples
  WriteSyntheticFile(Path("shard-0.h5"), a);
  WriteSyntheticFile(Path("shard-1.h5"), b);

  DataConfig data;
  data.train_path = Path("shard-*.h5");
  data.val_fraction = 0.3;  // the last 3 samples: B's samples 3..5
  auto sources = OpenDataSources(data, 1000, T);
  ASSERT_TRUE(sources.ok()) << sources.status().message();
  ASSERT_EQ(sources->train_files.size(), 2u);
  EXPECT_EQ(sources->train_files[0]->path(), Path("shard-0.h5"));  // sorted
  EXPECT_EQ(sources->train.num_samples(), 7);
  EXPECT_EQ(sources->val.num_samples(), 3);

  // The reference: each file's own reads of its samples.
  auto read_file = [&](const std::string& name, int64_t id) {
    auto file = TokenDataset::Open(Path(name), 1000);
    std::vector<int32_t> x(T), y(T);
    EXPECT_TRUE(file.value()->ReadSamples(std::vector<int64_t>{id}, T, x.data(), y.data()).ok());
    x.insert(x.end(), y.begin(), y.end());
    return x;
  };
  const std::vector<int64_t> ids = {6, 0, 3, 4, 5, 1};  // runs in B, A, A|B, B
  std::vector<int32_t> x(ids.size() * T), y(ids.size() * T);
  ASSERT_TRUE(sources->train.ReadSamples(ids, T, x.data(), y.data()).ok());
  for (size_t r = 0; r < ids.size(); ++r) {
    const bool in_a = ids[r] < 4;
    std::vector<int32_t> got(x.begin() + r * T, x.begin() + (r + 1) * T);
    got.insert(got.end(), y.begin() + r * T, y.begin() + (r + 1) * T);
    EXPECT_EQ(got, read_file(in_a ? "shard-0.h5" : "shard-1.h5", in_a ? ids[r] : ids[r] - 4))
        << "set sample " << ids[r];
  }
  std::vector<int32_t> vx(T), vy(T);
  ASSERT_TRUE(sources->val.ReadSamples({0}, T, vx.data(), vy.data()).ok());
  vx.insert(vx.end(), vy.begin(), vy.end());
  EXPECT_EQ(vx, read_file("shard-1.h5", 3));
  EXPECT_FALSE(sources->train.ReadSamples({7}, T, x.data(), y.data()).ok());  // held out

  // A comma list (a file twice counts twice), spaces allowed around the commas.
  data.train_path = Path("shard-1.h5") + " , " + Path("shard-0.h5") + "," + Path("shard-1.h5");
  data.val_fraction = 0;
  auto listed = OpenDataSources(data, 1000, T);
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  EXPECT_EQ(listed->train.num_samples(), 16);
  EXPECT_EQ(listed->train.Describe(), "3 files: " + Path("shard-1.h5") + ", " + Path("shard-0.h5") +
                                          ", " + Path("shard-1.h5"));

  // Data.train_weights: one weight per entry (a pattern is one entry).
  data.train_path = Path("shard-0.h5") + "," + Path("shard-1.h5");
  data.train_weights = "0.5, 2";
  auto weighted = OpenDataSources(data, 1000, T);
  ASSERT_TRUE(weighted.ok()) << weighted.status().message();
  EXPECT_EQ(weighted->train_plan.places(), 2 + 12);
  data.train_path = Path("shard-*.h5");
  data.train_weights = "3";
  ASSERT_TRUE(OpenDataSources(data, 1000, T).ok());
  for (const char* bad : {"1,1", "-1", "0", "x", "1x", ""}) {
    data.train_weights = bad;
    if (*bad == '\0') continue;  // empty: no weights
    auto refused = OpenDataSources(data, 1000, T);
    EXPECT_EQ(refused.status().code(), ExitCode::kUsage) << bad;
    EXPECT_NE(refused.status().message().find("Data.train_weights"), std::string::npos) << bad;
  }
  data.train_weights.clear();

  // Errors name the key and the fix.
  data.train_path = Path("none-*.h5");
  auto nothing = OpenDataSources(data, 1000, T);
  EXPECT_EQ(nothing.status().code(), ExitCode::kData);
  EXPECT_NE(nothing.status().message().find("no file matches"), std::string::npos);
  data.train_path = Path("shard-0.h5") + ",,";
  EXPECT_EQ(OpenDataSources(data, 1000, T).status().code(), ExitCode::kData);
  data.train_path = Path("shard-0.h5") + ", ";  // a trailing comma too
  EXPECT_EQ(OpenDataSources(data, 1000, T).status().code(), ExitCode::kData);
  b.tokenizer = "bytes";
  WriteSyntheticFile(Path("shard-2.h5"), b);
  data.train_path = Path("shard-*.h5");
  auto mixed = OpenDataSources(data, 1000, T);
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("packed differently"), std::string::npos);
  data.train_path = Path("shard-0.h5");
  data.val_path = Path("shard-2.h5");  // the validation files too
  EXPECT_NE(OpenDataSources(data, 1000, T).status().message().find("packed differently"),
            std::string::npos);
}

}  // namespace
}  // namespace trainer
