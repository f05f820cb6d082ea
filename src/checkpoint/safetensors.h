// A writer of the safetensors format (Hugging Face's; https://huggingface.co/docs/safetensors):
// an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and byte
// range, padded with spaces to a multiple of 8 bytes, then the tensors' bytes back to back, in
// the order given. Values come in as f32 and are stored as F32 or BF16 (rounded to nearest even).
// The file is written as <path>.tmp and renamed when complete.
#pragma once

#include <cstdint>
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

}  // namespace trainer
