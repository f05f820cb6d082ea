// The training and validation data of a run, from the Data section of the config: which files,
// and which samples of each (DataSplit). With no Data.val_path and Data.val_fraction > 0, the
// last floor(n * val_fraction) samples (at least 1) of the training file are held out.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "config/train_config.h"
#include "data/dataset.h"

namespace trainer {

struct HeldOutSplits {
  DataSplit train;
  DataSplit val;  // empty (num_samples 0) when val_fraction is 0
};

// Splits `num_samples` samples of `path`: the last floor(n * val_fraction), at least 1, are val.
StatusOr<HeldOutSplits> HoldOutValidation(const std::string& path, int64_t num_samples,
                                          double val_fraction);

struct DataSources {
  std::shared_ptr<TokenDataset> train_file;
  DataSplit train;
  std::shared_ptr<TokenDataset> val_file;  // nullptr: no validation data; may be train_file
  DataSplit val;
};

// Opens Data.train_path (and Data.val_path when set), checks each holds a sample of `seq_len`
// tokens and that its vocabulary fits the model, and splits the samples.
StatusOr<DataSources> OpenDataSources(const DataConfig& data, int64_t model_vocab_size, int seq_len,
                                      const DatasetOpenOptions& options = {});

}  // namespace trainer
