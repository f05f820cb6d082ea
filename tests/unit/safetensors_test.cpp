// The safetensors reader against files built byte by byte here (F16 normals, the largest half and
// a subnormal, BF16, F32, each against its closed-form value), the writer read back (F32 exact,
// BF16 rounded to nearest even at hand-picked ties), and files that break the format.
#include "checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>

namespace trainer {
namespace {

std::string TempPath(const char* name) {
  return std::string(::testing::TempDir()) + "/" + name + "_" + std::to_string(getpid());
}

// A file of `header` (padded to 8 bytes) and `data`, as the format lays them out.
std::string WriteRaw(const char* name, std::string header, const std::string& data,
                     uint64_t claimed_length = 0) {
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t length = claimed_length ? claimed_length : header.size();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(length >> (8 * i));
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << bytes << header << data;
  return path;
}

std::string Le16(std::initializer_list<uint16_t> values) {
  std::string out;
  for (uint16_t v : values) out += {static_cast<char>(v & 0xff), static_cast<char>(v >> 8)};
  return out;
}

TEST(Safetensors, ReadsF16Bf16AndF32AsTheirValues) {
  std::string data = Le16({0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x8000});  // F16, 12 bytes
  data += Le16({0x3F80, 0x4049, 0xBF00, 0x0000});                             // BF16, 8 bytes
  const float f32[3] = {1.5f, -7.25f, 1e-30f};
  data.append(reinterpret_cast<const char*>(f32), sizeof(f32));  // 12 bytes
  const std::string path = WriteRaw("read",
                                    R"({"__metadata__":{"format":"pt"},)"
                                    R"("a":{"dtype":"F16","shape":[6],"data_offsets":[0,12]},)"
                                    R"("b":{"dtype":"BF16","shape":[2,2],"data_offsets":[12,20]},)"
                                    R"("c":{"dtype":"F32","shape":[3],"data_offsets":[20,32]}})",
                                    data);
  std::map<std::string, SafetensorsTensor> t;
  const Status s = ReadSafetensors(path, &t);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t["a"].values,
            (std::vector<float>{1.f, -2.f, 0.5f, 65504.f, std::ldexp(1.f, -24), -0.f}));
  EXPECT_TRUE(std::signbit(t["a"].values[5]));
  EXPECT_EQ(t["b"].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t["b"].values, (std::vector<float>{1.f, 3.140625f, -0.5f, 0.f}));
  EXPECT_EQ(t["c"].values, (std::vector<float>{1.5f, -7.25f, 1e-30f}));
  std::remove(path.c_str());
}

TEST(Safetensors, WriterReadsBackAlignedExactInF32AndRoundedInBf16) {
  // 1 + 2^-8 and 1 + 3 * 2^-8 lie halfway between bf16 neighbours: ties go to the even one.
  const std::vector<float> values = {
      1.f + std::ldexp(1.f, -8), 1.f + 3 * std::ldexp(1.f, -8), -2.5f, 1e-3f, 0.f, 3.f};
  const std::vector<float> bf16 = {1.f, 1.015625f, -2.5f, 0.00099945068359375f, 0.f, 3.f};
  for (const auto dtype : {SafetensorsDType::kF32, SafetensorsDType::kBF16}) {
    const std::string path = TempPath("roundtrip");
    ASSERT_TRUE(WriteSafetensors(path, {{"x", {2, 3}, values}, {"y", {1}, {42.f}}}, dtype,
                                 {{"format", "pt"}, {"source", "a \"quoted\" path"}})
                    .ok());
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    const uint64_t size = static_cast<uint64_t>(in.tellg());
    in.seekg(0);
    unsigned char length[8];
    in.read(reinterpret_cast<char*>(length), 8);
    uint64_t header = 0;
    for (int i = 0; i < 8; ++i) header |= static_cast<uint64_t>(length[i]) << (8 * i);
    const size_t element = dtype == SafetensorsDType::kF32 ? 4 : 2;
    EXPECT_EQ(header % 8, 0u);
    EXPECT_EQ(size, 8 + header + 7 * element);
    std::map<std::string, SafetensorsTensor> t;
    const Status s = ReadSafetensors(path, &t);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(t["x"].shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(t["x"].values, dtype == SafetensorsDType::kF32 ? values : bf16);
    EXPECT_EQ(t["y"].values, std::vector<float>{42.f});
    std::remove(path.c_str());
  }
}

TEST(Safetensors, FilesThatBreakTheFormatAreErrorsNamingTheFile) {
  const std::string tensor = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const struct {
    const char* name;
    std::string path;
    const char* why;
  } cases[] = {
      {"truncated", WriteRaw("truncated", tensor, std::string(8, '\0'), 1 << 20), "past the end"},
      {"not json", WriteRaw("notjson", "{not json", std::string(8, '\0')), "not JSON"},
      {"dtype",
       WriteRaw("dtype", R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                std::string(8, '\0')),
       "I64"},
      {"offsets", WriteRaw("offsets", tensor, std::string(4, '\0')), "data_offsets"},
      // (2^58 + 1) x 64 x 4 bytes wraps past 2^64 to 256, the span given: refused by its shape.
      {"wrapping shape",
       WriteRaw("wrap",
                R"({"a":{"dtype":"F32","shape":[288230376151711745,64],"data_offsets":[0,256]}})",
                std::string(256, '\0')),
       "too large"},
      {"negative shape",
       WriteRaw("negative", R"({"a":{"dtype":"F32","shape":[-2,-1],"data_offsets":[0,8]}})",
                std::string(8, '\0')),
       "negative"},
  };
  for (const auto& c : cases) {
    std::map<std::string, SafetensorsTensor> t;
    std::vector<SafetensorsEntry> entries;  // the header alone (inspect's) refuses them too
    uint64_t data_start = 0;
    if (std::string(c.name) != "dtype" && std::string(c.name) != "truncated" &&
        std::string(c.name) != "not json")
      EXPECT_FALSE(ReadSafetensorsIndex(c.path, &entries, &data_start).ok()) << c.name;
    const Status s = ReadSafetensors(c.path, &t);
    EXPECT_FALSE(s.ok()) << c.name;
    EXPECT_NE(s.message().find(c.path), std::string::npos) << c.name << ": " << s.message();
    EXPECT_NE(s.message().find(c.why), std::string::npos) << c.name << ": " << s.message();
    std::remove(c.path.c_str());
  }
}

}  // namespace
}  // namespace trainer
