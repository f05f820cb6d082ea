// The samples of one or more packed files as one set (see sample_set.h).
#include "data/sample_set.h"

#include <algorithm>

#include "common/log.h"

namespace trainer {

SampleSet::SampleSet(std::vector<Part> parts) {
  starts_.push_back(0);
  for (Part& part : parts) {
    if (part.split.num_samples <= 0) continue;
    starts_.push_back(starts_.back() + part.split.num_samples);
    parts_.push_back(std::move(part));
  }
}

SampleSet SampleSet::Slice(int64_t first, int64_t count) const {
  std::vector<Part> sliced;
  for (size_t i = 0; i < parts_.size(); ++i) {
    const int64_t begin = std::max(first, starts_[i]);
    const int64_t end = std::min(first + count, starts_[i + 1]);
    if (begin >= end) continue;
    const DataSplit& split = parts_[i].split;
    sliced.push_back(
        {parts_[i].file, DataSplit{split.first_sample + begin - starts_[i], end - begin}});
  }
  return SampleSet(std::move(sliced));
}

std::string SampleSet::Describe() const {
  if (parts_.size() == 1) return parts_[0].file->path();
  constexpr size_t kNamed = 3;
  std::string text = StrFormat("%zu files: ", parts_.size());
  for (size_t i = 0; i < parts_.size() && i < kNamed; ++i)
    text += (i > 0 ? ", " : "") + parts_[i].file->path();
  if (parts_.size() > kNamed) text += ", ...";
  return text;
}

Status SampleSet::ReadSamples(const std::vector<int64_t>& ids, int seq_len, int32_t* inputs,
                              int32_t* targets, const std::vector<int64_t>& shifts,
                              int32_t* doc_starts) const {
  const int64_t row = seq_len;
  std::vector<int64_t> run;
  for (size_t begin = 0; begin < ids.size();) {
    if (ids[begin] < 0 || ids[begin] >= num_samples())
      return RuntimeError(StrFormat("sample %lld is outside %s (%lld samples)",
                                    static_cast<long long>(ids[begin]), Describe().c_str(),
                                    static_cast<long long>(num_samples())));
    const size_t part =
        std::upper_bound(starts_.begin(), starts_.end(), ids[begin]) - starts_.begin() - 1;
    run.clear();
    size_t end = begin;
    for (; end < ids.size() && ids[end] >= starts_[part] && ids[end] < starts_[part + 1]; ++end)
      run.push_back(ids[end] - starts_[part]);
    const int64_t at = row * static_cast<int64_t>(begin);
    TRAINER_RETURN_IF_ERROR(parts_[part].file->ReadSamples(
        parts_[part].split, run, seq_len, inputs ? inputs + at : nullptr,
        targets ? targets + at : nullptr, shifts.empty() ? nullptr : &shifts[begin],
        doc_starts ? doc_starts + at : nullptr));
    begin = end;
  }
  return Status::Ok();
}

void SampleSet::EnableDocumentStarts() const {
  for (const Part& part : parts_) part.file->EnableDocumentStarts();
}

}  // namespace trainer
