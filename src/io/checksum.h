// CRC-32 checksums of checkpoint tensors: the IEEE 802.3 polynomial (reflected, 0xEDB88320), the
// same value as zlib's crc32() and Python's zlib.crc32(), so a user can check a tensor read with
// h5py without this trainer. Computed over the tensor's little-endian float32 bytes in C order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainer {

// CRC-32 of `bytes` bytes at `data`, continuing from `crc` (0 to start; as zlib's crc32()).
uint32_t Crc32(const void* data, size_t bytes, uint32_t crc = 0);

// CRC-32 of `count` floats as stored in a checkpoint (little-endian IEEE float32).
uint32_t TensorChecksum(const float* data, size_t count);

}  // namespace trainer
