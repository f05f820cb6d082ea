// CRC-32 (checksum.h) by zlib's crc32_z(), the function behind Python's zlib.crc32.
#include "io/checksum.h"

#include <zlib.h>

namespace trainer {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "TensorChecksum hashes floats as they lie in memory: little-endian hosts only");

uint32_t Crc32(const void* data, size_t bytes, uint32_t crc) {
  // zlib answers a null buffer with its initial value (0), not with `crc`.
  if (bytes == 0) return crc;
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), bytes));
}

uint32_t TensorChecksum(const float* data, size_t count) {
  return Crc32(data, count * sizeof(float));
}

}  // namespace trainer
