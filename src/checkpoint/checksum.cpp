// CRC-32 (checksum.h), table-driven, eight bytes per step ("slicing by 8"): table k holds the CRC
// of a byte followed by k zero bytes, so eight lookups advance the CRC over eight bytes at once.
#include "checkpoint/checksum.h"

namespace trainer {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "TensorChecksum hashes floats as they lie in memory: little-endian hosts only");

constexpr uint32_t kPolynomial = 0xEDB88320u;  // reflected IEEE 802.3 polynomial

struct Crc32Tables {
  uint32_t table[8][256];
  Crc32Tables() {
    for (uint32_t byte = 0; byte < 256; ++byte) {
      uint32_t crc = byte;
      for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ kPolynomial : crc >> 1;
      table[0][byte] = crc;
    }
    for (int k = 1; k < 8; ++k)
      for (uint32_t byte = 0; byte < 256; ++byte) {
        const uint32_t previous = table[k - 1][byte];
        table[k][byte] = (previous >> 8) ^ table[0][previous & 0xffu];
      }
  }
};

const Crc32Tables& Tables() {
  static const Crc32Tables tables;
  return tables;
}

uint32_t LoadLittleEndian32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

uint32_t Crc32(const void* data, size_t bytes, uint32_t crc) {
  const auto& t = Tables().table;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (; bytes >= 8; bytes -= 8, p += 8) {
    const uint32_t low = crc ^ LoadLittleEndian32(p);
    const uint32_t high = LoadLittleEndian32(p + 4);
    crc = t[7][low & 0xffu] ^ t[6][(low >> 8) & 0xffu] ^ t[5][(low >> 16) & 0xffu] ^
          t[4][low >> 24] ^ t[3][high & 0xffu] ^ t[2][(high >> 8) & 0xffu] ^
          t[1][(high >> 16) & 0xffu] ^ t[0][high >> 24];
  }
  for (; bytes > 0; --bytes, ++p) crc = (crc >> 8) ^ t[0][(crc ^ *p) & 0xffu];
  return ~crc;
}

uint32_t TensorChecksum(const float* data, size_t count) {
  return Crc32(data, count * sizeof(float));
}

}  // namespace trainer
