// The safetensors writer (safetensors.h).
#include "checkpoint/safetensors.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

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
    return RuntimeError(StrFormat("cannot write %s: %s. Check the folder is writable", tmp.c_str(),
                                  std::strerror(errno)));
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
    return RuntimeError(
        StrFormat("writing %s failed: %s (disk full?)", tmp.c_str(), std::strerror(write_errno)));
  }
  return RenameDurably(tmp, path);
}

namespace {

// IEEE half to float (normals, subnormals, infinities, NaN).
float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const int exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | static_cast<uint32_t>(exponent - 15 + 127) << 23 | mantissa << 13;
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400) == 0);
    bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mantissa & 0x3ff) << 13;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Bytes per element of the float dtypes this reader takes (F32, BF16, F16); 0 for another.
size_t FloatBytes(const std::string& dtype) {
  return dtype == "F32" ? 4 : dtype == "BF16" || dtype == "F16" ? 2 : 0;
}

Status BadSafetensors(const std::string& path, const std::string& why) {
  return CheckpointError(
      StrFormat("%s is not a safetensors file this trainer reads: %s", path.c_str(), why.c_str()));
}

}  // namespace

Status ReadSafetensorsIndex(const std::string& path, std::vector<SafetensorsEntry>* entries,
                            uint64_t* data_start) {
  if (PathExists(path) && !IsRegularFile(path))  // a FIFO would block the reader
    return BadSafetensors(path, "it is not a file (a folder, FIFO or device)");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return CheckpointError(StrFormat("cannot open %s: %s", path.c_str(), std::strerror(errno)));
  in.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  unsigned char length[8] = {};
  if (size < 8 || !in.read(reinterpret_cast<char*>(length), 8))
    return BadSafetensors(path, "shorter than 8 bytes");
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= static_cast<uint64_t>(length[i]) << (8 * i);
  if (header_bytes > size - 8)
    return BadSafetensors(path, "its header runs past the end of the file");
  std::string header(header_bytes, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header_bytes)))
    return BadSafetensors(path, "its header cannot be read");
  *data_start = 8 + header_bytes;
  const uint64_t data_bytes = size - *data_start;
  YAML::Node root;
  try {
    root = YAML::Load(header);
  } catch (const YAML::Exception& e) {
    return BadSafetensors(path, std::string("its header is not JSON (") + e.what() + ")");
  }
  if (!root.IsMap()) return BadSafetensors(path, "its header is not a JSON object");
  entries->clear();
  try {
    for (const auto& item : root) {
      SafetensorsEntry e;
      e.name = item.first.as<std::string>();
      if (e.name == "__metadata__") continue;
      e.dtype = item.second["dtype"].as<std::string>();
      for (const auto& d : item.second["shape"]) e.shape.push_back(d.as<int64_t>());
      e.begin = item.second["data_offsets"][0].as<uint64_t>();
      e.end = item.second["data_offsets"][1].as<uint64_t>();
      if (e.begin > e.end || e.end > data_bytes)
        return BadSafetensors(path, e.name + "'s data_offsets lie outside the file");
      // The shape's bytes, without wrapping past 2^64, are its data_offsets' span.
      const uint64_t element = FloatBytes(e.dtype);
      uint64_t bytes = element;
      for (int64_t d : e.shape)
        if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
          return BadSafetensors(path, e.name + "'s shape " + ShapeText(e.shape) +
                                          " is negative or too large for any file");
      if (element != 0 && bytes != e.end - e.begin)
        return BadSafetensors(path, e.name + "'s data_offsets do not fit its shape");
      entries->push_back(std::move(e));
    }
  } catch (const YAML::Exception& e) {
    return BadSafetensors(path, std::string("its header lacks a field (") + e.what() + ")");
  }
  return Status::Ok();
}

Status ReadSafetensors(const std::string& path, std::map<std::string, SafetensorsTensor>* out) {
  std::vector<SafetensorsEntry> entries;
  uint64_t data_start = 0;
  TRAINER_RETURN_IF_ERROR(ReadSafetensorsIndex(path, &entries, &data_start));
  std::ifstream in(path, std::ios::binary);
  out->clear();
  for (const SafetensorsEntry& e : entries) {
    const size_t element = FloatBytes(e.dtype);
    if (element == 0)
      return BadSafetensors(path, e.name + " has dtype " + e.dtype + " (F32, BF16 or F16 only)");
    uint64_t count = 1;
    for (int64_t d : e.shape) count *= static_cast<uint64_t>(d);
    if (e.end - e.begin != count * element)
      return BadSafetensors(path, e.name + "'s data_offsets do not fit its shape");
    std::vector<unsigned char> raw(e.end - e.begin);
    in.seekg(static_cast<std::streamoff>(data_start + e.begin));
    if (!in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size())))
      return BadSafetensors(path, e.name + "'s data cannot be read");
    SafetensorsTensor t;
    t.name = e.name;
    t.shape = e.shape;
    t.values.resize(count);
    for (uint64_t i = 0; i < count; ++i) {
      if (element == 4) {
        std::memcpy(&t.values[i], &raw[4 * i], 4);  // little-endian host
      } else {
        const uint16_t h = static_cast<uint16_t>(raw[2 * i] | raw[2 * i + 1] << 8);
        t.values[i] = e.dtype == "BF16" ? BF16ToFloat(h) : HalfToFloat(h);
      }
    }
    (*out)[e.name] = std::move(t);
  }
  return Status::Ok();
}

}  // namespace trainer
