// The safetensors format (Hugging Face's; https://huggingface.co/docs/safetensors): an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape and byte range,
// padded with spaces to a multiple of 8 bytes, then the tensors' bytes back to back.
// The writer takes f32 values and stores them as F32 or BF16 (rounded to nearest even), in the
// order given, as <path>.tmp renamed when complete. The reader gives every tensor as f32 (from
// F32, BF16 or F16; the JSON header parsed with yaml-cpp, JSON being YAML).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainer {

struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // row-major, shape's element count
};

enum class SafetensorsDType { kF32, kBF16 };

// `metadata`: string pairs for the header's "__metadata__" (e.g. {"format", "pt"}).
Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                        SafetensorsDType dtype,
                        const std::vector<std::pair<std::string, std::string>>& metadata);

// One tensor's entry in a file's header; [begin, end) is its byte range after the header.
struct SafetensorsEntry {
  std::string name, dtype;  // dtype as the file names it ("F32", "BF16", "F16", ...)
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

// The header of `path`: its tensors (not "__metadata__"), in the header's order, and where their
// bytes start in the file. Errors as ReadSafetensors's.
Status ReadSafetensorsIndex(const std::string& path, std::vector<SafetensorsEntry>* entries,
                            uint64_t* data_start);

// Every tensor of `path` by name, as f32. A file that does not follow the format (a header past
// the file's end or not JSON, offsets outside the data or not matching the shape, another dtype)
// is a checkpoint error naming the file.
Status ReadSafetensors(const std::string& path, std::map<std::string, SafetensorsTensor>* out);

}  // namespace trainer
