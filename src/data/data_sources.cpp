// Training and validation data of a run (see data_sources.h).
#include "data/data_sources.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>
#include <utility>

#include "common/filesystem.h"
#include "common/log.h"
#include "common/strings.h"
#include "io/checksum.h"

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
  TRAINER_ASSIGN_OR_RETURN(const auto entries, ExpandDataEntries(value, key));
  std::vector<std::string> paths;
  for (const auto& entry : entries) paths.insert(paths.end(), entry.begin(), entry.end());
  return paths;
}

StatusOr<std::vector<std::vector<std::string>>> ExpandDataEntries(const std::string& value,
                                                                  const std::string& key) {
  std::vector<std::vector<std::string>> entries;
  const size_t last_char = value.find_last_not_of(" \t");
  if (last_char != std::string::npos && value[last_char] == ',')
    return DataError(
        StrFormat("empty file name in %s ('%s'): separate the files with single "
                  "commas",
                  key.c_str(), value.c_str()));
  std::stringstream items(value);
  std::string entry;
  while (std::getline(items, entry, ',')) {
    const size_t first = entry.find_first_not_of(" \t");
    const size_t last = entry.find_last_not_of(" \t");
    if (first == std::string::npos)
      return DataError(
          StrFormat("empty file name in %s ('%s'): separate the files with single "
                    "commas",
                    key.c_str(), value.c_str()));
    entry = entry.substr(first, last - first + 1);
    if (entry.find_first_of("*?[") == std::string::npos) {
      entries.push_back({entry});
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
    entries.emplace_back(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);  // sorted
    globfree(&matches);
  }
  if (entries.empty())
    return DataError(StrFormat("no file in %s ('%s')", key.c_str(), value.c_str()));
  return entries;
}

namespace {

// Opens one file of `key`; it must hold a sample and be packed like `like` (the first file
// opened, of either key).
Status OpenFile(const std::string& path, const std::string& key, int64_t model_vocab_size,
                int seq_len, const DatasetOpenOptions& options,
                std::vector<std::shared_ptr<TokenDataset>>* files, const TokenDataset** like) {
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
  return Status::Ok();
}

// Opens every file of `key`'s value (OpenFile), noting the entry of the value each comes from.
Status OpenFiles(const std::string& value, const std::string& key, int64_t model_vocab_size,
                 int seq_len, const DatasetOpenOptions& options,
                 std::vector<std::shared_ptr<TokenDataset>>* files, const TokenDataset** like,
                 std::vector<size_t>* entry_of_file = nullptr) {
  TRAINER_ASSIGN_OR_RETURN(const auto entries, ExpandDataEntries(value, key));
  for (size_t e = 0; e < entries.size(); ++e)
    for (const std::string& path : entries[e]) {
      TRAINER_RETURN_IF_ERROR(OpenFile(path, key, model_vocab_size, seq_len, options, files, like));
      if (entry_of_file) entry_of_file->push_back(e);
    }
  return Status::Ok();
}

// A file of Data.train_path that is also one of Data.val_path (the same file by device and inode,
// however named: a training glob such as shard-*.h5 also matches pack's shard-00000.val.h5) would
// be trained on and evaluated as held out: a data error naming it.
Status CheckTrainValOverlap(const DataConfig& data) {
  TRAINER_ASSIGN_OR_RETURN(const std::vector<std::string> val,
                           ExpandDataPaths(data.val_path, "Data.val_path"));
  TRAINER_ASSIGN_OR_RETURN(const std::vector<std::string> train,
                           ExpandDataPaths(data.train_path, "Data.train_path"));
  std::set<std::pair<dev_t, ino_t>> val_files;
  struct stat info;
  for (const std::string& path : val)
    if (stat(path.c_str(), &info) == 0) val_files.emplace(info.st_dev, info.st_ino);
  for (const std::string& path : train) {
    if (stat(path.c_str(), &info) != 0 || !val_files.count({info.st_dev, info.st_ino})) continue;
    return DataError(StrFormat(
        "training file is also a validation file (%s, Data.train_path '%s' and Data.val_path "
        "'%s'): it would be trained on and then evaluated as held out. Narrow Data.train_path "
        "(e.g. 'shard-[0-9]*.h5' instead of 'shard-*.h5'), or name the validation files apart "
        "(trainer pack --val-output val-00000.h5; slurm/pack.sbatch writes val-<i>.h5)",
        path.c_str(), data.train_path.c_str(), data.val_path.c_str()));
  }
  return Status::Ok();
}

// Data.train_weights: one positive number per comma-separated entry of Data.train_path.
StatusOr<std::vector<double>> ParseWeights(const std::string& value, size_t entries) {
  std::vector<double> weights;
  std::stringstream items(value);
  std::string item;
  while (std::getline(items, item, ',')) {
    char* end = nullptr;
    const double w = std::strtod(item.c_str(), &end);
    const bool rest_blank = end != item.c_str() &&
                            item.find_first_not_of(" \t", end - item.c_str()) == std::string::npos;
    if (!rest_blank || !std::isfinite(w) || !(w > 0))
      return UsageError(
          StrFormat("invalid Data.train_weights ('%s'): '%s' is not a positive "
                    "number. Give one weight per entry of Data.train_path, e.g. "
                    "0.5,2",
                    value.c_str(), item.c_str()));
    weights.push_back(w);
  }
  if (weights.size() != entries)
    return UsageError(
        StrFormat("Data.train_weights has %zu weights for the %zu entries of "
                  "Data.train_path: give one per comma-separated entry (a glob "
                  "pattern is one entry)",
                  weights.size(), entries));
  return weights;
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
  if (!data.val_path.empty()) TRAINER_RETURN_IF_ERROR(CheckTrainValOverlap(data));
  DataSources sources;
  const TokenDataset* like = nullptr;
  std::vector<size_t> entry_of_file;
  TRAINER_RETURN_IF_ERROR(OpenFiles(data.train_path, "Data.train_path", model_vocab_size, seq_len,
                                    options, &sources.train_files, &like, &entry_of_file));
  const SampleSet all = AllSamples(sources.train_files, seq_len);
  if (!data.val_path.empty()) {
    TRAINER_RETURN_IF_ERROR(OpenFiles(data.val_path, "Data.val_path", model_vocab_size, seq_len,
                                      options, &sources.val_files, &like));
    sources.train = all;
    sources.val = AllSamples(sources.val_files, seq_len);
  } else {
    TRAINER_ASSIGN_OR_RETURN(
        HeldOutSplits splits,
        HoldOutValidation(all.Describe(), all.num_samples(), data.val_fraction));
    sources.train = all.Slice(splits.train.first_sample, splits.train.num_samples);
    sources.val = all.Slice(splits.val.first_sample, splits.val.num_samples);
  }
  if (data.train_weights.empty()) return sources;
  // The training samples of each entry: the training set's parts are the files in order (a
  // held-out validation part only shortens its end).
  const size_t entries = entry_of_file.empty() ? 0 : entry_of_file.back() + 1;
  TRAINER_ASSIGN_OR_RETURN(const std::vector<double> weights,
                           ParseWeights(data.train_weights, entries));
  std::vector<int64_t> entry_samples(entries, 0);
  const auto& parts = sources.train.parts();
  for (size_t i = 0; i < parts.size(); ++i)
    entry_samples[entry_of_file[i]] += parts[i].split.num_samples;
  // An epoch's places are counted in int64 and in double (exact up to 2^53).
  constexpr double kMostPlaces = 9007199254740992.0;  // 2^53
  double places = 0;
  std::vector<std::string> entry_names(entries);  // each entry's first file
  for (size_t i = sources.train_files.size(); i-- > 0;)
    entry_names[entry_of_file[i]] = sources.train_files[i]->path();
  for (size_t e = 0; e < entries; ++e) {
    places += weights[e] * static_cast<double>(entry_samples[e]);
    if (entry_samples[e] == 0 && weights[e] != 1.0)
      sources.warnings.push_back(StrFormat(
          "Data.train_weights: entry %zu of Data.train_path (%s) has no training samples: "
          "Data.val_fraction holds out the last samples of the whole set, here all of it, so its "
          "weight %g does nothing. Give a validation file (Data.val_path), or list that entry "
          "before the others",
          e + 1, entry_names[e].c_str(), weights[e]));
  }
  if (places > kMostPlaces)
    return UsageError(StrFormat(
        "Data.train_weights (%s) make an epoch of %.3g samples, beyond the 2^53 the sampler "
        "orders: the weights are how often each entry's samples are visited an epoch. Give "
        "smaller ones (e.g. 1,3)",
        data.train_weights.c_str(), places));
  sources.train_plan = EpochPlan(entry_samples, weights);
  return sources;
}

Status CheckTrainableData(const DataSources& sources, const TrainConfig& config) {
  const int64_t per_epoch =
      sources.train_plan.empty() ? sources.train.num_samples() : sources.train_plan.places();
  const int global_batch_size = config.global.global_batch_size;
  if (per_epoch < global_batch_size)
    return DataError(StrFormat(
        "dataset too small (%s, Data.train_path): %lld training samples of %d tokens, fewer "
        "than one global batch of %d. Use more data, or a smaller Global.global_batch_size or "
        "Model.seq_len",
        config.data.train_path.c_str(), static_cast<long long>(per_epoch),
        config.model.sequence_length(), global_batch_size));
  if (config.engine.eval_freq > 0 && sources.val.num_samples() <= 0)
    return NoValidationDataError(config.data, config.engine.eval_freq);
  return Status::Ok();
}

Status NoValidationDataError(const DataConfig& data, int eval_freq) {
  std::string fix = "Set Data.val_path to a validation file";
  // trainer pack --val-fraction writes the held-out tokens beside the training file.
  const std::string suffix = ".h5";
  const std::string& train = data.train_path;
  if (train.find_first_of(",*?[") == std::string::npos && train.size() > suffix.size() &&
      EndsWith(train, suffix)) {
    const std::string val = train.substr(0, train.size() - suffix.size()) + ".val.h5";
    if (PathExists(val))
      fix = "Set Data.val_path=" + val + " (trainer pack wrote it beside the training file)";
  }
  return DataError(StrFormat(
      "no validation data (Data.val_path, Data.val_fraction, Engine.eval_freq): "
      "Engine.eval_freq=%d evaluates every %d steps, but Data.val_path is empty and "
      "Data.val_fraction=0 holds out none of %s. %s, Data.val_fraction above 0 (e.g. 0.05), or "
      "Engine.eval_freq=0 to train without evaluation",
      eval_freq, eval_freq, train.c_str(), fix.c_str()));
}

Status DataFingerprint(const DataSources& sources, std::string* text) {
  text->clear();
  const auto describe = [text](const char* what, const SampleSet& set,
                               const std::vector<std::shared_ptr<TokenDataset>>& files) {
    uint32_t crc = 0;
    for (const auto& file : files) {
      uint32_t one = 0;
      TRAINER_RETURN_IF_ERROR(file->Fingerprint(&one));
      crc = Crc32(&one, sizeof(one), crc);
    }
    *text += StrFormat("%s%s %lld samples in %zu files (CRC-32 %08x)", text->empty() ? "" : "; ",
                       what, static_cast<long long>(set.num_samples()), files.size(), crc);
    return Status::Ok();
  };
  TRAINER_RETURN_IF_ERROR(describe("training", sources.train, sources.train_files));
  if (sources.val.num_samples() == 0) return Status::Ok();
  if (sources.val_files.empty()) {  // the training files' last samples (Data.val_fraction)
    *text += StrFormat("; validation %lld samples held out",
                       static_cast<long long>(sources.val.num_samples()));
    return Status::Ok();
  }
  return describe("validation", sources.val, sources.val_files);
}

}  // namespace trainer
