// SampleSet: the samples of one or more packed-token files as one numbered set: file 0's samples
// (or a DataSplit of them) first, then file 1's, and so on. A sample never runs across two files.
// Reads go to each file for its own samples only, so a rank still touches nothing but its rows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/dataset.h"

namespace trainer {

class SampleSet {
 public:
  struct Part {
    std::shared_ptr<TokenDataset> file;
    DataSplit split;
  };

  SampleSet() = default;
  explicit SampleSet(std::vector<Part> parts);

  int64_t num_samples() const { return starts_.empty() ? 0 : starts_.back(); }
  const std::vector<Part>& parts() const { return parts_; }
  // The set's samples [first, first + count) as a set of their own (0 <= first, first + count <=
  // num_samples()).
  SampleSet Slice(int64_t first, int64_t count) const;
  // "a.h5", or "3 files: a.h5, b.h5, c.h5" (the first few and the count), for messages.
  std::string Describe() const;

  // Reads samples by set id into inputs (n, T) and targets (n, T), int32, n = ids.size(): each
  // run of ids that fall in one file is one call of that file's ReadSamples. `shifts` (n, or
  // empty): each window's offset past its fixed start (TokenDataset::ReadSamples).
  // doc_starts (n, T) or null: each window's document starts, inputs and targets may then be
  // null (TokenDataset::ReadSamples; EnableDocumentStarts first).
  Status ReadSamples(const std::vector<int64_t>& ids, int seq_len, int32_t* inputs,
                     int32_t* targets, const std::vector<int64_t>& shifts = {},
                     int32_t* doc_starts = nullptr) const;
  // Data.packing: documents: every file's windows get their document starts (TokenDataset).
  void EnableDocumentStarts() const;

 private:
  std::vector<Part> parts_;
  std::vector<int64_t> starts_;  // starts_[i]: the set id of part i's first sample; then the total
};

}  // namespace trainer
