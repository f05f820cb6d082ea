// Data.packing: documents: each window's document starts and ignored targets, from /doc_offsets
// (TokenDataset::ReadSamples with doc_starts), against the starts computed here from the whole
// list of offsets.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "data/dataset.h"
#include "data_test_util.h"

namespace trainer {
namespace {

using testing_data::DataTest;
using testing_data::RandomFileTokens;
using testing_data::SyntheticFile;
using testing_data::WriteSyntheticFile;

class DocumentStartsTest : public DataTest {};

// Data.packing: documents: each window's document starts and the targets at document starts,
// against a brute-force reading of /doc_offsets (an empty document, windows that start
// mid-document, shifted windows); a middle pipeline stage's read (no tokens) gives the same.
TEST_F(DocumentStartsTest, DocumentStartsFollowDocOffsets) {
  const int T = 8;
  SyntheticFile spec;
  spec.tokens = RandomFileTokens(5 * T + 1, 1000, 6);
  spec.doc_offsets = {0, 3, 3, 11, 12, 20, 41};
  WriteSyntheticFile(Path("d.h5"), spec);
  auto opened = TokenDataset::Open(Path("d.h5"), 1024);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  TokenDataset& file = **opened;
  const DataSplit split{0, 5};
  const std::vector<int64_t> ids = {0, 1, 2, 3, 1}, shifts = {0, 0, 2, 1, 4};
  const size_t n = ids.size() * T;
  std::vector<int32_t> inputs(n), targets(n), starts(n, -7), starts_only(n, -7);
  EXPECT_FALSE(
      file.ReadSamples(split, ids, T, inputs.data(), targets.data(), shifts.data(), starts.data())
          .ok());  // EnableDocumentStarts first
  file.EnableDocumentStarts();
  ASSERT_TRUE(
      file.ReadSamples(split, ids, T, inputs.data(), targets.data(), shifts.data(), starts.data())
          .ok());
  ASSERT_TRUE(
      file.ReadSamples(split, ids, T, nullptr, nullptr, shifts.data(), starts_only.data()).ok());
  EXPECT_EQ(starts, starts_only);
  auto begins_document = [&](int64_t pos) {
    for (size_t d = 0; d + 1 < spec.doc_offsets.size(); ++d)
      if (static_cast<int64_t>(spec.doc_offsets[d]) == pos) return true;
    return false;
  };
  for (size_t r = 0; r < ids.size(); ++r) {
    const int64_t first = ids[r] * T + shifts[r];
    for (int t = 0; t < T; ++t) {
      int64_t start = first;  // the window's first token, or a later document start
      for (int64_t pos = first; pos <= first + t; ++pos)
        if (begins_document(pos)) start = pos;
      ASSERT_EQ(starts[r * T + t], start - first) << r << " " << t;
      const int32_t token = static_cast<int32_t>(spec.tokens[first + t + 1]);
      ASSERT_EQ(targets[r * T + t], begins_document(first + t + 1) ? -1 : token) << r << " " << t;
    }
  }
  // Window 0: documents at 0 and 3; window 3 (tokens 25..32) starts inside the document at 20.
  EXPECT_EQ(std::vector<int32_t>(starts.begin(), starts.begin() + T),
            (std::vector<int32_t>{0, 0, 0, 3, 3, 3, 3, 3}));
  EXPECT_EQ(std::vector<int32_t>(starts.begin() + 3 * T, starts.begin() + 4 * T),
            std::vector<int32_t>(T, 0));
}

// /doc_offsets read around each window, not whole: a file of 60,000 documents (empty ones, runs
// of one-token ones, a few of thousands of tokens, lopsided so that interpolation guesses badly)
// against the starts every window gets from the whole list in memory, for random windows and
// for runs of consecutive ones (which reuse the entries read).
TEST_F(DocumentStartsTest, DocumentStartsOfManyDocumentsReadAroundEachWindow) {
  const int T = 64;
  std::mt19937_64 rng(17);
  SyntheticFile spec;
  spec.doc_offsets = {0};
  while (spec.doc_offsets.size() < 60000) {
    const uint64_t pick = rng() % 100;
    const uint64_t length = pick < 5 ? 0 : pick < 40 ? 1 : pick < 99 ? 1 + rng() % 30 : 5000;
    spec.doc_offsets.push_back(spec.doc_offsets.back() + length);
  }
  if (spec.doc_offsets.back() == spec.doc_offsets[spec.doc_offsets.size() - 2])
    spec.doc_offsets.back() += 1;  // the last document holds its end-of-document token
  spec.tokens = RandomFileTokens(static_cast<int64_t>(spec.doc_offsets.back()), 1000, 8);
  WriteSyntheticFile(Path("many.h5"), spec);
  auto opened = TokenDataset::Open(Path("many.h5"), 1024);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  TokenDataset& file = **opened;
  file.EnableDocumentStarts();
  const int64_t samples = file.NumSamples(T);
  const DataSplit split{0, samples};
  std::vector<int64_t> ids, shifts;
  for (int i = 0; i < 300; ++i) {
    ids.push_back(static_cast<int64_t>(rng() % samples));
    shifts.push_back(static_cast<int64_t>(rng() % T));
  }
  for (int64_t id = samples - 40; id < samples; ++id) ids.push_back(id), shifts.push_back(0);
  std::vector<int32_t> inputs(ids.size() * T), targets(ids.size() * T), starts(ids.size() * T);
  ASSERT_TRUE(
      file.ReadSamples(split, ids, T, inputs.data(), targets.data(), shifts.data(), starts.data())
          .ok());
  const std::vector<uint64_t>& off = spec.doc_offsets;
  const auto begins_document = [&](int64_t pos) {
    return std::binary_search(off.begin(), off.end() - 1, static_cast<uint64_t>(pos));
  };
  for (size_t r = 0; r < ids.size(); ++r) {
    const int64_t first = ids[r] * T + (ids[r] == samples - 1 ? 0 : shifts[r]);
    int64_t start = first;
    for (int t = 0; t < T; ++t) {
      if (begins_document(first + t)) start = first + t;
      ASSERT_EQ(starts[r * T + t], start - first) << "window " << r << " token " << t;
      const int32_t token = static_cast<int32_t>(spec.tokens[first + t + 1]);
      ASSERT_EQ(targets[r * T + t], begins_document(first + t + 1) ? -1 : token) << r << " " << t;
    }
  }
}

}  // namespace
}  // namespace trainer
