// Training and validation data of a run (see data_sources.h).
#include "data/data_sources.h"

#include <algorithm>
#include <cmath>

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

StatusOr<DataSources> OpenDataSources(const DataConfig& data, int64_t model_vocab_size, int seq_len,
                                      const DatasetOpenOptions& options) {
  if (data.train_path.empty())
    return UsageError(
        "missing Data.train_path (config): set it to a file written by "
        "`trainer pack`");
  DataSources sources;
  TRAINER_ASSIGN_OR_RETURN(std::unique_ptr<TokenDataset> train,
                           TokenDataset::Open(data.train_path, model_vocab_size, options));
  TRAINER_RETURN_IF_ERROR(train->RequireSamples(seq_len, 1, "Data.train_path"));
  sources.train_file = std::move(train);
  const int64_t train_samples = sources.train_file->NumSamples(seq_len);

  if (!data.val_path.empty()) {
    TRAINER_ASSIGN_OR_RETURN(std::unique_ptr<TokenDataset> val,
                             TokenDataset::Open(data.val_path, model_vocab_size, options));
    TRAINER_RETURN_IF_ERROR(val->RequireSamples(seq_len, 1, "Data.val_path"));
    sources.val = DataSplit{0, val->NumSamples(seq_len)};
    sources.val_file = std::move(val);
    sources.train = DataSplit{0, train_samples};
    return sources;
  }
  TRAINER_ASSIGN_OR_RETURN(HeldOutSplits splits,
                           HoldOutValidation(data.train_path, train_samples, data.val_fraction));
  sources.train = splits.train;
  sources.val = splits.val;
  if (splits.val.num_samples > 0) sources.val_file = sources.train_file;
  return sources;
}

}  // namespace trainer
