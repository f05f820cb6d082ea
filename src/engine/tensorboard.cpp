// TensorBoardWriter (tensorboard.h).
#include "engine/tensorboard.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/filesystem.h"
#include "common/log.h"

namespace trainer {
namespace {

// Protobuf wire format: key = field << 3 | wire type (0 varint, 1 64-bit, 2 bytes, 5 32-bit).
void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void PutFixed(std::string* out, const void* bytes, size_t n) {
  out->append(static_cast<const char*>(bytes), n);  // little-endian hosts (x86-64, aarch64)
}
void PutBytesField(std::string* out, int field, const std::string& bytes) {
  PutVarint(out, static_cast<uint64_t>(field) << 3 | 2);
  PutVarint(out, bytes.size());
  out->append(bytes);
}

// An Event with wall_time (1, double) and step (2, int64); the caller appends the payload.
std::string EventHeader(int64_t step) {
  const double wall_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string event;
  PutVarint(&event, 1 << 3 | 1);
  PutFixed(&event, &wall_time, 8);
  PutVarint(&event, 2 << 3 | 0);
  PutVarint(&event, static_cast<uint64_t>(step));
  return event;
}

uint32_t MaskedCrc(const void* data, size_t n) {
  const uint32_t crc = Crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace

uint32_t Crc32c(const void* data, size_t bytes) {
  static uint32_t table[256];
  static const bool ready = [] {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      table[i] = c;
    }
    return true;
  }();
  (void)ready;
  uint32_t crc = 0xffffffffu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

Status OutputWriteError(const std::string& path, int error_number) {
  const ProcessIdentity& id = GetProcessIdentity();
  return RuntimeError(StrFormat(
      "cannot write %s (Engine.output_dir, rank %d on %s): %s. Free space there or set "
      "Engine.output_dir to another folder, then resume with --resume auto (the record that "
      "failed was cut off, the file stays whole)",
      path.c_str(), id.rank, id.host.c_str(), std::strerror(error_number)));
}

namespace {
Status CannotCreate(const std::string& path, int error_number) {
  return RuntimeError(StrFormat(
      "cannot create %s: %s (Engine.output_dir). Choose a writable Engine.output_dir or set "
      "Engine.tensorboard=false",
      path.c_str(), std::strerror(error_number)));
}
}  // namespace

Status TensorBoardWriter::Open(const std::string& folder, std::unique_ptr<TensorBoardWriter>* out) {
  TRAINER_RETURN_IF_ERROR(MakeDirectories(folder));
  std::unique_ptr<TensorBoardWriter> w(new TensorBoardWriter());
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  const long long seconds = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  w->path_ = StrFormat("%s/events.out.tfevents.%lld.%s", folder.c_str(), seconds, host);
  if (access(folder.c_str(), W_OK) != 0) return CannotCreate(w->path_, errno);
  *out = std::move(w);
  return Status::Ok();
}

Status TensorBoardWriter::Create() {
  file_ = std::fopen(path_.c_str(), "ab");
  if (file_ == nullptr) return CannotCreate(path_, errno);
  std::string event = EventHeader(0);
  PutBytesField(&event, 3, "brain.Event:2");  // file_version
  return WriteRecord(event);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

Status TensorBoardWriter::WriteScalars(int64_t step,
                                       const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    PutBytesField(&v, 1, tag);
    const float f = static_cast<float>(value);
    PutVarint(&v, 2 << 3 | 5);  // simple_value
    PutFixed(&v, &f, 4);
    PutBytesField(&summary, 1, v);
  }
  std::string event = EventHeader(step);
  PutBytesField(&event, 5, summary);
  return WriteRecord(event);
}

Status TensorBoardWriter::WriteSessionStart(int64_t step) {
  std::string session_log;
  PutVarint(&session_log, 1 << 3 | 0);  // status
  PutVarint(&session_log, 1);           // SessionLog.START
  std::string event = EventHeader(step);
  PutBytesField(&event, 7, session_log);  // Event.session_log (6 is the deprecated log_message)
  return WriteRecord(event);
}

Status TensorBoardWriter::WriteRecord(const std::string& event) {
  if (file_ == nullptr) TRAINER_RETURN_IF_ERROR(Create());
  const uint64_t length = event.size();
  const uint32_t length_crc = MaskedCrc(&length, 8), data_crc = MaskedCrc(event.data(), length);
  std::string record(reinterpret_cast<const char*>(&length), 8);
  record.append(reinterpret_cast<const char*>(&length_crc), 4);
  record.append(event);
  record.append(reinterpret_cast<const char*>(&data_crc), 4);
  if (!AppendWholeRecord(file_, record)) return OutputWriteError(path_, errno);
  return Status::Ok();
}

}  // namespace trainer
