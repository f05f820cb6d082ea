// The training and validation data of a run, from the Data section of the config: which files,
// and which samples of each. Data.train_path and Data.val_path name one file, several separated
// by commas, or glob patterns (each expanded in sorted order), whose samples form one set
// (SampleSet). With no Data.val_path and Data.val_fraction > 0, the last floor(n * val_fraction)
// samples (at least 1) of the training set are held out.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/train_config.h"
#include "data/dataset.h"
#include "data/sample_set.h"
#include "data/sampler.h"

namespace trainer {

struct HeldOutSplits {
  DataSplit train;
  DataSplit val;  // empty (num_samples 0) when val_fraction is 0
};

// Splits `num_samples` samples of `path`: the last floor(n * val_fraction), at least 1, are val.
StatusOr<HeldOutSplits> HoldOutValidation(const std::string& path, int64_t num_samples,
                                          double val_fraction);

// The files a Data.train_path or Data.val_path value names, in order: comma-separated entries,
// each a path or a glob pattern (expanded in sorted order). A pattern that matches nothing, or
// an empty entry, is a data error naming `key`. ExpandDataEntries keeps them by entry.
StatusOr<std::vector<std::vector<std::string>>> ExpandDataEntries(const std::string& value,
                                                                  const std::string& key);
StatusOr<std::vector<std::string>> ExpandDataPaths(const std::string& value,
                                                   const std::string& key);

// The samples of the files `value` names (as Data.train_path; `key` names it in messages), each
// file checked as OpenDataSources checks them.
StatusOr<SampleSet> OpenSampleSet(const std::string& value, const std::string& key,
                                  int64_t model_vocab_size, int seq_len,
                                  const DatasetOpenOptions& options = {});

struct DataSources {
  std::vector<std::shared_ptr<TokenDataset>> train_files;
  std::vector<std::shared_ptr<TokenDataset>> val_files;  // empty with a held-out validation set
  SampleSet train;
  SampleSet val;         // no samples: no validation data
  EpochPlan train_plan;  // Data.train_weights over the entries of Data.train_path; empty: none
  std::vector<std::string> warnings;  // settings that do nothing here (one rank prints them)
};

// Opens the files of Data.train_path (and Data.val_path when set), checks each holds a sample of
// `seq_len` tokens, that its vocabulary fits the model and that all were packed alike (tokenizer,
// vocab_size, eod_id), splits the samples, and plans the epochs by Data.train_weights.
StatusOr<DataSources> OpenDataSources(const DataConfig& data, int64_t model_vocab_size, int seq_len,
                                      const DatasetOpenOptions& options = {});

// What tells the opened data apart from other data of its size, for ranks to compare their
// copies: "training N samples in F files (CRC-32 X)", then "; validation M samples in G files
// (CRC-32 Y)" or "; validation M samples held out", the CRCs over each file's
// TokenDataset::Fingerprint.
Status DataFingerprint(const DataSources& sources, std::string* text);

// What a run refuses in data that opened (train at start, `trainer check` ahead of it): an epoch
// (the training samples, or Data.train_weights' places) shorter than one global batch, and
// Engine.eval_freq > 0 with no validation samples.
Status CheckTrainableData(const DataSources& sources, const TrainConfig& config);

// Engine.eval_freq > 0 with no validation samples: the data error naming the keys, and the
// .val.h5 that trainer pack wrote beside the training file, if there is one.
Status NoValidationDataError(const DataConfig& data, int eval_freq);

}  // namespace trainer
