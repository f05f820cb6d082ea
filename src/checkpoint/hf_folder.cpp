// Hugging Face model folders: whole and sharded safetensors weights (hf_folder.h).
#include "checkpoint/hf_folder.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

#include "checkpoint/hf_config.h"
#include "common/filesystem.h"
#include "common/log.h"
#include "common/strings.h"
#include "io/checksum.h"

namespace trainer {
namespace {

const char kIndex[] = "model.safetensors.index.json";

bool IsIndex(const std::string& weights) {
  return EndsWith(weights, ".index.json");
}

// The index's weight_map: tensor name -> shard file (relative to the index's folder).
Status ReadIndex(const std::string& index, std::map<std::string, std::string>* weight_map) {
  YAML::Node root;
  TRAINER_RETURN_IF_ERROR(LoadJsonFile(index, &root));
  if (!root.IsMap() || !root["weight_map"] || !root["weight_map"].IsMap())
    return CheckpointError(
        StrFormat("%s has no weight_map (a sharded Hugging Face model's index maps each tensor to "
                  "its file)",
                  index.c_str()));
  weight_map->clear();
  for (const auto& item : root["weight_map"]) {
    if (!item.first.IsScalar() || !item.second.IsScalar())
      return CheckpointError(StrFormat(
          "%s: a weight_map entry is not \"tensor name\": \"file name\" (a sharded Hugging Face "
          "model's index maps each tensor to its file)",
          index.c_str()));
    (*weight_map)[item.first.as<std::string>()] = item.second.as<std::string>();
  }
  return Status::Ok();
}

// A file that the index beside it names as one shard of several: the model is the folder.
Status RefuseOneShard(const std::string& file) {
  const std::string dir = ParentDirectory(file), index = dir + "/" + kIndex;
  std::map<std::string, std::string> weight_map;
  if (!PathExists(index) || !ReadIndex(index, &weight_map).ok()) return Status::Ok();
  std::set<std::string> files;
  for (const auto& item : weight_map) files.insert(item.second);
  if (files.size() < 2 || !files.count(file.substr(file.rfind('/') + 1))) return Status::Ok();
  return CheckpointError(
      StrFormat("%s is one shard of a sharded model (%s maps its tensors to %zu files): give the "
                "model's folder (%s) or its index",
                file.c_str(), index.c_str(), files.size(), dir.c_str()));
}

// Shard files of the index `weights` (or the one file), each with the tensors the index gives it.
Status Shards(const std::string& weights, std::map<std::string, std::set<std::string>>* shards) {
  shards->clear();
  if (!IsIndex(weights)) {
    TRAINER_RETURN_IF_ERROR(RefuseOneShard(weights));
    (*shards)[weights];
    return Status::Ok();
  }
  std::map<std::string, std::string> weight_map;
  TRAINER_RETURN_IF_ERROR(ReadIndex(weights, &weight_map));
  const std::string dir = ParentDirectory(weights);
  for (const auto& [name, file] : weight_map) {
    if (file.find('/') != std::string::npos || file.empty() || file[0] == '.')
      return CheckpointError(StrFormat("%s maps %s to %s: shards lie beside the index",
                                       weights.c_str(), name.c_str(), file.c_str()));
    (*shards)[dir + "/" + file].insert(name);
  }
  for (const auto& [file, listed] : *shards)
    if (!PathExists(file))
      return CheckpointError(StrFormat(
          "%s maps %s (and %zu more tensors) to %s, which is missing: copy the whole model "
          "folder (every file the index names)",
          weights.c_str(), listed.begin()->c_str(), listed.size() - 1, file.c_str()));
  return Status::Ok();
}

template <typename Named>
Status CheckShard(const std::string& index, const std::string& file,
                  const std::set<std::string>& listed, const std::vector<Named>& names) {
  std::set<std::string> held;
  for (const auto& n : names) held.insert(n);
  for (const std::string& name : listed)
    if (!held.count(name))
      return CheckpointError(StrFormat("%s maps %s to %s, which does not hold it", index.c_str(),
                                       name.c_str(), file.c_str()));
  for (const std::string& name : held)
    if (!listed.count(name))
      return CheckpointError(StrFormat("%s holds %s, which %s does not map to it", file.c_str(),
                                       name.c_str(), index.c_str()));
  return Status::Ok();
}

uint64_t TensorBytes(const SafetensorsTensor& t, SafetensorsDType dtype) {
  return t.values.size() * (dtype == SafetensorsDType::kF32 ? 4 : 2);
}

// Tensor indices per shard, transformers' way: a new shard when the next tensor would pass the
// limit.
std::vector<std::vector<size_t>> Plan(const std::vector<SafetensorsTensor>& tensors,
                                      SafetensorsDType dtype, uint64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards(1);
  uint64_t bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t b = TensorBytes(tensors[i], dtype);
    if (!shards.back().empty() && bytes + b > max_shard_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(i);
    bytes += b;
  }
  return shards;
}

std::string ShardName(size_t k, size_t n) {
  return n == 1 ? "model.safetensors" : StrFormat("model-%05zu-of-%05zu.safetensors", k + 1, n);
}

}  // namespace

std::string HuggingFaceWeightsFile(const std::string& path) {
  if (IsDirectory(path)) {
    if (PathExists(path + "/model.safetensors")) return path + "/model.safetensors";
    return PathExists(path + "/" + kIndex) ? path + "/" + kIndex : "";
  }
  const bool named = EndsWith(path, ".safetensors") || EndsWith(path, kIndex);
  return named && PathExists(path) ? path : "";
}

long long HuggingFaceWeightsBytes(const std::string& weights) {
  std::map<std::string, std::set<std::string>> shards;
  if (!Shards(weights, &shards).ok()) return -1;
  long long bytes = 0;
  for (const auto& item : shards) bytes += FileSize(item.first);  // each exists (Shards)
  return bytes;
}

Status HuggingFaceWeightsFingerprint(const std::string& weights, std::string* text) {
  std::map<std::string, std::set<std::string>> shards;
  TRAINER_RETURN_IF_ERROR(Shards(weights, &shards));
  constexpr long long kSample = 1 << 20;
  long long bytes = 0;
  uint32_t crc = 0;
  std::vector<char> buffer;
  for (const auto& item : shards) {
    const long long size = FileSize(item.first);
    std::ifstream in(item.first, std::ios::binary);
    if (size < 0 || !in)
      return CheckpointError(
          StrFormat("cannot read %s: %s", item.first.c_str(), std::strerror(errno)));
    for (const long long start : {0LL, std::max(0LL, size - kSample)}) {
      buffer.resize(static_cast<size_t>(std::min(kSample, size)));
      in.seekg(start);
      if (!in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())))
        return CheckpointError(StrFormat("cannot read %s (%lld bytes)", item.first.c_str(), size));
      crc = Crc32(buffer.data(), buffer.size(), crc);
    }
    crc = Crc32(&size, sizeof(size), crc);
    bytes += size;
  }
  *text = StrFormat("%lld bytes, head/tail CRC-32 %08x", bytes, crc);
  return Status::Ok();
}

std::string HuggingFaceFolderHint(const std::string& path) {
  if (!IsDirectory(path) || !PathExists(path + "/config.json")) return "";
  if (!HuggingFaceWeightsFile(path).empty())
    return StrFormat(
        " %s is a Hugging Face model folder: start a run from it with "
        "-o Checkpoint.init_from=%s (trainer inspect %s prints the Model keys it needs), then use "
        "that run's checkpoints",
        path.c_str(), path.c_str(), path.c_str());
  if (PathExists(path + "/pytorch_model.bin") || PathExists(path + "/pytorch_model.bin.index.json"))
    return StrFormat(
        " %s holds pytorch_model.bin, which the trainer does not read: save the model as "
        "safetensors (transformers: model.save_pretrained(DIR, safe_serialization=True))",
        path.c_str());
  return StrFormat(
      " %s has a config.json but no model.safetensors (or index): copy the whole "
      "model folder",
      path.c_str());
}

std::string HuggingFaceFolder(const std::string& weights) {
  return ParentDirectory(weights);
}

Status ReadHuggingFaceEntries(const std::string& weights, std::vector<SafetensorsEntry>* entries) {
  std::map<std::string, std::set<std::string>> shards;
  TRAINER_RETURN_IF_ERROR(Shards(weights, &shards));
  entries->clear();
  for (const auto& [file, listed] : shards) {
    std::vector<SafetensorsEntry> part;
    uint64_t data_start = 0;
    TRAINER_RETURN_IF_ERROR(ReadSafetensorsIndex(file, &part, &data_start));
    if (IsIndex(weights)) {
      std::vector<std::string> names;
      for (const SafetensorsEntry& e : part) names.push_back(e.name);
      TRAINER_RETURN_IF_ERROR(CheckShard(weights, file, listed, names));
    }
    entries->insert(entries->end(), part.begin(), part.end());
  }
  std::sort(entries->begin(), entries->end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.name < b.name; });
  return Status::Ok();
}

Status ReadHuggingFaceTensors(const std::string& weights,
                              std::map<std::string, SafetensorsTensor>* tensors,
                              Progress* progress) {
  std::map<std::string, std::set<std::string>> shards;
  TRAINER_RETURN_IF_ERROR(Shards(weights, &shards));
  tensors->clear();
  for (const auto& [file, listed] : shards) {
    ReportProgress(progress, "loading pretrained weights (a Hugging Face shard)");
    std::map<std::string, SafetensorsTensor> part;
    TRAINER_RETURN_IF_ERROR(ReadSafetensors(file, &part));
    if (IsIndex(weights)) {
      std::vector<std::string> names;
      for (const auto& item : part) names.push_back(item.first);
      TRAINER_RETURN_IF_ERROR(CheckShard(weights, file, listed, names));
    }
    for (auto& item : part) (*tensors)[item.first] = std::move(item.second);
  }
  return Status::Ok();
}

uint64_t ParseShardSize(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 15) return 0;
  const uint64_t n = std::stoull(text.substr(0, digits));
  std::string unit = text.substr(digits);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::map<std::string, uint64_t> units = {{"", 1},
                                                 {"B", 1},
                                                 {"KB", 1000},
                                                 {"MB", 1000 * 1000},
                                                 {"GB", 1000ull * 1000 * 1000},
                                                 {"KIB", 1024},
                                                 {"MIB", 1024 * 1024},
                                                 {"GIB", 1024ull * 1024 * 1024}};
  auto it = units.find(unit);
  return it == units.end() ? 0 : n * it->second;
}

std::vector<std::string> HuggingFaceWeightFiles(const std::vector<SafetensorsTensor>& tensors,
                                                SafetensorsDType dtype, uint64_t max_shard_bytes) {
  const size_t n = Plan(tensors, dtype, max_shard_bytes).size();
  std::vector<std::string> files;
  for (size_t k = 0; k < n; ++k) files.push_back(ShardName(k, n));
  if (n > 1) files.push_back(kIndex);
  return files;
}

Status WriteHuggingFaceWeights(const std::string& dir,
                               const std::vector<SafetensorsTensor>& tensors,
                               SafetensorsDType dtype,
                               const std::vector<std::pair<std::string, std::string>>& metadata,
                               uint64_t max_shard_bytes, std::vector<std::string>* files) {
  const std::vector<std::vector<size_t>> plan = Plan(tensors, dtype, max_shard_bytes);
  files->clear();
  std::string weight_map;
  uint64_t total = 0;
  for (size_t k = 0; k < plan.size(); ++k) {
    const std::string name = ShardName(k, plan.size());
    std::vector<SafetensorsTensor> shard;
    for (size_t i : plan[k]) {
      shard.push_back(tensors[i]);
      total += TensorBytes(tensors[i], dtype);
      weight_map += StrFormat("%s    %s: %s", weight_map.empty() ? "" : ",\n",
                              JsonQuoted(tensors[i].name).c_str(), JsonQuoted(name).c_str());
    }
    TRAINER_RETURN_IF_ERROR(WriteSafetensors(dir + "/" + name, shard, dtype, metadata));
    files->push_back(name);
  }
  if (plan.size() == 1) return Status::Ok();
  files->push_back(kIndex);
  return WriteFileAtomically(
      dir + "/" + kIndex,
      StrFormat("{\n  \"metadata\": {\"total_size\": %llu},\n  \"weight_map\": {\n%s\n  }\n}\n",
                static_cast<unsigned long long>(total), weight_map.c_str()));
}

}  // namespace trainer
