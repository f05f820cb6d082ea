// Internal to src/checkpoint: which ranks hold the canonical shards of each full parameter, and
// HDF5 dataset helpers for full fp32 tensors with Fletcher32 checksums.
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

#include "common/parallel_groups.h"
#include "data/hdf5_util.h"
#include "model/parameters.h"

namespace trainer {

// The three tensors stored for each parameter.
constexpr int kStateCount = 3;
const char* StateGroup(int which);  // "/model", "/optim/exp_avg", "/optim/exp_avg_sq"

// Full parameter list (as one rank holding everything would see it).
std::vector<ParameterInfo> FullParameterList(const ModelConfig& model);
// Pipeline stage that holds `p` for the given layer partition.
int StageOf(const ParameterInfo& p, const ModelConfig& model, const DistributedConfig& dist);
// World ranks (dp 0) holding the canonical shards of `p`, in TP order.
std::vector<int> CanonicalHolders(const ParameterInfo& p, const ModelConfig& model,
                                  const DistributedConfig& dist, const Topology& topo);

// Create a chunked f32 dataset with the Fletcher32 filter and write `data` (full shape).
Status WriteTensor(hid_t file, const std::string& path, const std::vector<int64_t>& shape,
                   const float* data);
// Read this TP rank's shard of `p` from the dataset at `path` (hyperslabs only; no full read).
Status ReadShard(hid_t file, const std::string& path, const ParameterInfo& p, int tp_rank,
                 int tp_size, float* local);
// Shape of a dataset.
Status DatasetShape(hid_t file, const std::string& path, std::vector<int64_t>* shape);

}  // namespace trainer
