// Rank-prefixed logging (see log.h).
#include "common/log.h"

#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <set>
#include <vector>

namespace trainer {
namespace {
ProcessIdentity g_identity;
}

void SetProcessIdentity(const ProcessIdentity& identity) {
  g_identity = identity;
}
const ProcessIdentity& GetProcessIdentity() {
  return g_identity;
}

std::string RankTag() {
  if (g_identity.world_size <= 1) return "";
  return "[rank " + std::to_string(g_identity.rank) + " " + g_identity.host + "] ";
}

namespace {
FILE* g_info_stream = nullptr;  // nullptr: stdout
}  // namespace

void SendInfoToStderr() {
  g_info_stream = stderr;
}

void LogInfo(const std::string& message) {
  if (g_identity.rank != 0) return;
  FILE* out = g_info_stream != nullptr ? g_info_stream : stdout;
  std::fprintf(out, "%s\n", message.c_str());
  std::fflush(out);
}

void LogWarning(const std::string& message) {
  std::string tag = g_identity.rank == 0 ? "" : RankTag();
  std::fprintf(stderr, "%swarning: %s\n", tag.c_str(), message.c_str());
  std::fflush(stderr);
}

void LogSharedWarningOnce(const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> given;
  if (g_identity.rank != 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!given.insert(message).second) return;
  }
  LogWarning(message);
}

void LogError(const std::string& message) {
  std::string tag = g_identity.rank == 0 ? "" : RankTag();
  std::fprintf(stderr, "%serror: %s\n", tag.c_str(), message.c_str());
  std::fflush(stderr);
}

std::string StrFormat(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::vector<char> buffer(static_cast<size_t>(n) + 1);
  std::vsnprintf(buffer.data(), buffer.size(), format, args);
  va_end(args);
  return std::string(buffer.data(), static_cast<size_t>(n));
}

std::string FormatBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  return unit == 0 ? StrFormat("%.0f B", bytes) : StrFormat("%.1f %s", bytes, units[unit]);
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string JsonQuoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\')
      out += {'\\', c};
    else if (static_cast<unsigned char>(c) < 0x20)
      out += StrFormat("\\u%04x", c);
    else
      out += c;
  }
  return out + "\"";
}

}  // namespace trainer
