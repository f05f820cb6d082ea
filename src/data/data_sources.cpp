// Training and validation data of a run (see data_sources.h).
#include "data/data_sources.h"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/log.h"

namespace trainer {

StatusOr<HeldOutSplits> HoldOutValidation(const std::string& path, int64_t num_samples,
                                          double val_fraction) {
  HeldOutSplits splits;
  splits.train = DataSplit{0, num_samples};
  if (val_fraction <= 0.0) return splits;
  if (!(val_fraction < 1.0))
    return UsageError(
        StrFormat("invalid Data.val_fraction (%s): %g is outside [0, 1). Use e.g. "
                  "0.01, or set Data.val_path",
                  path.c_str(), val_fraction));
  int64_t val = std::max<int64_t>(
      1, static_cast<int64_t>(std::floor(static_cast<double>(num_samples) * val_fraction)));
  if (num_samples - val < 1)
    return DataError(
        StrFormat("dataset too short to hold out validation (%s, Data.val_fraction): "
                  "%lld samples leave none for training. Pack more text, lower "
                  "Model.seq_len or set Data.val_path",
                  path.c_str(), static_cast<long long>(num_samples)));
  splits.train = DataSplit{0, num_samples - val};
  splits.val = DataSplit{num_samples - val, val};
  return splits;
}

StatusOr<std::vector<std::string>> ExpandDataPaths(const std::string& value,
                                                   const std::string& key) {
  std::vector<std::string> paths;
  const size_t last_char = value.find_last_not_of(" \t");
  if (last_char != std::string::npos && value[last_char] == ',')
    return DataError(
        StrFormat("empty file name in %s ('%s'): separate the files with single "
                  "commas",
                  key.c_str(), value.c_str()));
  std::stringstream entries(value);
  std::string entry;
  while (std::getline(entries, entry, ',')) {
    const size_t first = entry.find_first_not_of(" \t");
    const size_t last = entry.find_last_not_of(" \t");
    if (first == std::string::npos)
      return DataError(
          StrFormat("empty file name in %s ('%s'): separate the files with single "
                    "commas",
                    key.c_str(), value.c_str()));
    entry = entry.substr(first, last - first + 1);
    if (entry.find_first_of("*?[") == std::string::npos) {
      paths.push_back(entry);
      continue;
    }
    glob_t matches;
    const int rc = glob(entry.c_str(), 0, nullptr, &matches);
    if (rc != 0) {
      globfree(&matches);
      return DataError(rc == GLOB_NOMATCH
                           ? StrFormat("no file matches %s (%s): check the pattern and the folder",
                                       entry.c_str(), key.c_str())
                           : StrFormat("cannot expand %s (%s): a folder on its path is unreadable",
                                       entry.c_str(), key.c_str()));
    }
    for (size_t i = 0; i < matches.gl_pathc; ++i) paths.push_back(matches.gl_pathv[i]);  // sorted
    globfree(&matches);
  }
  if (paths.empty())
    return DataError(StrFormat("no file in %s ('%s')", key.c_str(), value.c_str()));
  return paths;
}

namespace {

// Opens every file of `key`'s value; each must hold a sample and be packed like `like` (the
// first file opened, of either key).
Status OpenFiles(const std::string& value, const std::string& key, int64_t model_vocab_size,
                 int seq_len, const DatasetOpenOptions& options,
                 std::vector<std::shared_ptr<TokenDataset>>* files, const TokenDataset** like) {
  TRAINER_ASSIGN_OR_RETURN(const std::vector<std::string> paths, ExpandDataPaths(value, key));
  for (const std::string& path : paths) {
    TRAINER_ASSIGN_OR_RETURN(std::unique_ptr<TokenDataset> file,
                             TokenDataset::Open(path, model_vocab_size, options));
    TRAINER_RETURN_IF_ERROR(file->RequireSamples(seq_len, 1, key));
    if (*like == nullptr) *like = file.get();
    const TokenDataset& a = **like;
    if (file->tokenizer() != a.tokenizer() || file->vocab_size() != a.vocab_size() ||
        file->eod_id() != a.eod_id())
      return DataError(StrFormat(
          "files packed differently (%s): %s has tokenizer %s, vocab_size %lld, eod_id %lld, "
          "but %s has %s, %lld, %lld. Pack every file of a run with the same tokenizer",
          key.c_str(), file->path().c_str(), file->tokenizer().c_str(),
          static_cast<long long>(file->vocab_size()), static_cast<long long>(file->eod_id()),
          a.path().c_str(), a.tokenizer().c_str(), static_cast<long long>(a.vocab_size()),
          static_cast<long long>(a.eod_id())));
    files->push_back(std::move(file));
  }
  return Status::Ok();
}

SampleSet AllSamples(const std::vector<std::shared_ptr<TokenDataset>>& files, int seq_len) {
  std::vector<SampleSet::Part> parts;
  for (const auto& file : files) parts.push_back({file, DataSplit{0, file->NumSamples(seq_len)}});
  return SampleSet(std::move(parts));
}

}  // namespace

StatusOr<SampleSet> OpenSampleSet(const std::string& value, const std::string& key,
                                  int64_t model_vocab_size, int seq_len,
                                  const DatasetOpenOptions& options) {
  std::vector<std::shared_ptr<TokenDataset>> files;
  const TokenDataset* like = nullptr;
  TRAINER_RETURN_IF_ERROR(OpenFiles(value, key, model_vocab_size, seq_len, options, &files, &like));
  return AllSamples(files, seq_len);
}

StatusOr<DataSources> OpenDataSources(const DataConfig& data, int64_t model_vocab_size, int seq_len,
                                      const DatasetOpenOptions& options) {
  if (data.train_path.empty())
    return UsageError(
        "missing Data.train_path (config): set it to a file written by "
        "`trainer pack`");
  DataSources sources;
  const TokenDataset* like = nullptr;
  TRAINER_RETURN_IF_ERROR(OpenFiles(data.train_path, "Data.train_path", model_vocab_size, seq_len,
                                    options, &sources.train_files, &like));
  const SampleSet all = AllSamples(sources.train_files, seq_len);
  if (!data.val_path.empty()) {
    TRAINER_RETURN_IF_ERROR(OpenFiles(data.val_path, "Data.val_path", model_vocab_size, seq_len,
                                      options, &sources.val_files, &like));
    sources.train = all;
    sources.val = AllSamples(sources.val_files, seq_len);
    return sources;
  }
  TRAINER_ASSIGN_OR_RETURN(HeldOutSplits splits,
                           HoldOutValidation(all.Describe(), all.num_samples(), data.val_fraction));
  sources.train = all.Slice(splits.train.first_sample, splits.train.num_samples);
  sources.val = all.Slice(splits.val.first_sample, splits.val.num_samples);
  return sources;
}

}  // namespace trainer
