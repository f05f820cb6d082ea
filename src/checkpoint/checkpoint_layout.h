// Internal to src/checkpoint: which ranks hold the canonical shards of each full parameter, and
// HDF5 dataset helpers for full fp32 tensors with two checksums: HDF5's Fletcher32 on every chunk
// (checked by HDF5 on every read, hyperslabs included) and our CRC-32 of the whole tensor in the
// dataset's `crc32` attribute (checked by VerifyCheckpoint).
#pragma once

#include <hdf5.h>

#include <functional>
#include <string>
#include <vector>

#include "common/parallel_groups.h"
#include "io/hdf5_util.h"
#include "model/parameters.h"

namespace trainer {

// The three tensors stored for each parameter.
constexpr int kStateCount = 3;
const char* StateGroup(int which);  // "/model", "/optim/exp_avg", "/optim/exp_avg_sq"

// Pipeline stage that holds `p` for the given layer partition.
int StageOf(const ParameterInfo& p, const ModelConfig& model, const DistributedConfig& dist);
// World ranks (dp 0) holding the canonical shards of `p`, in TP order (the experts: in EP order,
// the EP group of DP rank 0).
std::vector<int> CanonicalHolders(const ParameterInfo& p, const ModelConfig& model,
                                  const DistributedConfig& dist, const Topology& topo);

// Test hook: where the environment variable `name` holds <ms> > 0, sleeps that long (once per
// tensor: TRAINER_FAULT_CHECKPOINT_SLOW in writes, TRAINER_FAULT_CHECKPOINT_READ_SLOW in the
// verification and the load), so that tests can act while a save or a load goes on.
void InjectedCheckpointDelay(const char* name);

// Name of the per-tensor CRC-32 attribute (checksum.h), an integer on each dataset.
constexpr const char* kChecksumAttribute = "crc32";

// A tensor's HDF5 chunk: at most `limit` elements (~1 Mi by default), in whole rows of the trailing
// dimensions where one fits (for a 2-D tensor: whole rows), else one index of the leading
// dimension and as much of the next as fits (3-D experts: part of one expert's matrix).
std::vector<hsize_t> CheckpointChunkShape(const std::vector<hsize_t>& dims,
                                          hsize_t limit = hsize_t{1} << 20);

// Create a chunked f32 dataset with the Fletcher32 filter, write `data` (full shape) and its
// CRC-32 attribute. The values go in slabs of whole chunks; `after_slab`, when set, runs after
// each, outside any HDF5 call.
Status WriteTensor(hid_t file, const std::string& path, const std::vector<int64_t>& shape,
                   const float* data, const std::function<void()>& after_slab = {});
// Read shard tp_rank of tp_size of `p` (ShardSlotOf: the EP slot for the experts) from the
// dataset at `path` (hyperslabs only; no full read).
Status ReadShard(hid_t file, const std::string& path, const ParameterInfo& p, int tp_rank,
                 int tp_size, float* local);
// Shape of a dataset.
Status DatasetShape(hid_t file, const std::string& path, std::vector<int64_t>* shape);
// Every dataset's path in a checkpoint file ("model/<name>", "optim/exp_avg/<name>", ...), in
// name order (whatever the file format's own link order).
Status ListTensors(hid_t file_id, const std::string& file, std::vector<std::string>* paths);

// The fix of every error that finds a checkpoint file damaged.
constexpr const char* kDamagedAdvice =
    "The file is damaged: use another checkpoint (--resume auto falls back to the newest one "
    "that verifies; Checkpoint.init_from, eval, sample and export take an older step folder, "
    "which trainer inspect lists)";

}  // namespace trainer
