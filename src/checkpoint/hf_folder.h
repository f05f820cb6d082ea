// A Hugging Face model folder's weights, whole or sharded as transformers' save_pretrained writes
// them: model.safetensors, or model-0000K-of-0000N.safetensors with model.safetensors.index.json
// ({"metadata": {"total_size": bytes}, "weight_map": {tensor: file}}) above a shard size.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "common/progress.h"
#include "common/status.h"

namespace trainer {

// The weights `path` names: itself when it is a .safetensors file or a
// model.safetensors.index.json, else the model.safetensors or model.safetensors.index.json of a
// folder; "" when it names none.
std::string HuggingFaceWeightsFile(const std::string& path);

// The bytes of the weights' files: `weights` itself, or every shard an index names (not the
// index); -1 when the index cannot be read or names a missing shard.
long long HuggingFaceWeightsBytes(const std::string& weights);

// A cheap fingerprint of the weights' files (`weights` itself, or every shard an index names):
// "<bytes> bytes, head/tail CRC-32 <hex>" over each file's size and its first and last MiB, which
// tells apart two models of one shape (another fine-tune) without reading them whole.
Status HuggingFaceWeightsFingerprint(const std::string& weights, std::string* text);

// What a path that holds no trainer checkpoint is, where it is a Hugging Face model folder: a
// sentence for an error's end (import it with Checkpoint.init_from; or convert its
// pytorch_model.bin to safetensors); "" otherwise.
std::string HuggingFaceFolderHint(const std::string& path);

// The folder of `weights` (where config.json lies).
std::string HuggingFaceFolder(const std::string& weights);

// The tensors' headers of `weights` (HuggingFaceWeightsFile's), over every shard of an index,
// sorted by name. A tensor the index names that its shard lacks is a checkpoint error.
Status ReadHuggingFaceEntries(const std::string& weights, std::vector<SafetensorsEntry>* entries);

// Every tensor of `weights` as f32 (ReadSafetensors over each shard; `progress` told of each).
Status ReadHuggingFaceTensors(const std::string& weights,
                              std::map<std::string, SafetensorsTensor>* tensors,
                              Progress* progress = nullptr);

// "5GB", "20KB", "100MiB", "1000" (bytes) as bytes, as transformers' max_shard_size reads them
// (KB, MB, GB powers of 1000; KiB, MiB, GiB of 1024). 0 when it is not one.
uint64_t ParseShardSize(const std::string& text);

// The tensors as `dir`/model.safetensors, or, when they exceed `max_shard_bytes`, as shards of at
// most that size (a larger tensor alone in its shard), in the order given, with the index.
// *files: the files written (the weights' names, relative to dir).
Status WriteHuggingFaceWeights(const std::string& dir,
                               const std::vector<SafetensorsTensor>& tensors,
                               SafetensorsDType dtype,
                               const std::vector<std::pair<std::string, std::string>>& metadata,
                               uint64_t max_shard_bytes, std::vector<std::string>* files);

// The shard files WriteHuggingFaceWeights would write (without writing them).
std::vector<std::string> HuggingFaceWeightFiles(const std::vector<SafetensorsTensor>& tensors,
                                                SafetensorsDType dtype, uint64_t max_shard_bytes);

}  // namespace trainer
