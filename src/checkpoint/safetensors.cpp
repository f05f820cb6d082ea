// The safetensors writer (safetensors.h).
#include "checkpoint/safetensors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/filesystem.h"
#include "common/log.h"
#include "common/tensor.h"

namespace trainer {
namespace {

std::string Header(const std::vector<SafetensorsTensor>& tensors, SafetensorsDType dtype,
                   const std::vector<std::pair<std::string, std::string>>& metadata) {
  const size_t element = dtype == SafetensorsDType::kF32 ? 4 : 2;
  std::string json = "{\"__metadata__\":{";
  for (size_t i = 0; i < metadata.size(); ++i)
    json += (i ? "," : "") + JsonQuoted(metadata[i].first) + ":" + JsonQuoted(metadata[i].second);
  json += "}";
  size_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    std::string shape;
    for (size_t d = 0; d < t.shape.size(); ++d)
      shape += (d ? "," : "") + std::to_string(t.shape[d]);
    const size_t bytes = t.values.size() * element;
    json += "," + JsonQuoted(t.name) + ":{\"dtype\":\"" +
            (dtype == SafetensorsDType::kF32 ? "F32" : "BF16") + "\",\"shape\":[" + shape +
            "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + bytes) +
            "]}";
    offset += bytes;
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');  // the tensors' bytes start 8-byte aligned
  return json;
}

}  // namespace

Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                        SafetensorsDType dtype,
                        const std::vector<std::pair<std::string, std::string>>& metadata) {
  for (const SafetensorsTensor& t : tensors) {
    int64_t n = 1;
    for (int64_t s : t.shape) n *= s;
    if (n != static_cast<int64_t>(t.values.size()))
      return RuntimeError(StrFormat("safetensors: %s holds %zu values for a shape of %lld",
                                    t.name.c_str(), t.values.size(), static_cast<long long>(n)));
  }
  const std::string header = Header(tensors, dtype, metadata);
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr)
    return EnvironmentError(StrFormat("cannot write %s: %s. Check the folder is writable",
                                      tmp.c_str(), std::strerror(errno)));
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  bool ok = std::fwrite(length, 1, 8, f) == 8 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size();
  std::vector<uint16_t> rounded;
  for (const SafetensorsTensor& t : tensors) {
    if (!ok) break;
    if (dtype == SafetensorsDType::kF32) {  // the host is little-endian (x86-64, aarch64)
      ok = std::fwrite(t.values.data(), sizeof(float), t.values.size(), f) == t.values.size();
      continue;
    }
    rounded.resize(t.values.size());
    for (size_t i = 0; i < t.values.size(); ++i) rounded[i] = FloatToBF16(t.values[i]);
    ok = std::fwrite(rounded.data(), sizeof(uint16_t), rounded.size(), f) == rounded.size();
  }
  ok = std::fflush(f) == 0 && ok;
  const int write_errno = errno;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return EnvironmentError(
        StrFormat("writing %s failed: %s (disk full?)", tmp.c_str(), std::strerror(write_errno)));
  }
  return RenameDurably(tmp, path);
}

}  // namespace trainer
