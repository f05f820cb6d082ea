// Rank-prefixed logging. Rank 0 speaks by default; other ranks only for their own errors and
// warnings, prefixed "[rank R host]". The identity is set once by the bootstrap.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainer {

struct ProcessIdentity {
  int rank = 0;
  int world_size = 1;
  std::string host = "localhost";
};

void SetProcessIdentity(const ProcessIdentity& identity);
const ProcessIdentity& GetProcessIdentity();

// "<message>" on rank 0 only (stdout, or stderr after SendInfoToStderr).
void LogInfo(const std::string& message);
// LogInfo's lines to stderr from here on: for commands whose stdout is their result (a sample,
// eval's JSON record), so that progress lines never mix into it.
void SendInfoToStderr();
// "warning: <message>" on any rank that calls it (stderr), prefixed "[rank R host]" off rank 0.
void LogWarning(const std::string& message);
// A warning that every rank would give alike (about a file they all read, which the code may
// read several times): "warning: <message>" on rank 0, the first time this process gives it.
void LogSharedWarningOnce(const std::string& message);
// "error: <message>" on the calling rank (stderr), prefixed like warnings off rank 0.
void LogError(const std::string& message);
// "[rank R host] " (empty string on single-process runs), for messages that name their origin.
std::string RankTag();

// printf-style formatting into a std::string.
std::string StrFormat(const char* format, ...) __attribute__((format(printf, 1, 2)));
// "512 B", "12.5 GiB": a size for messages.
std::string FormatBytes(double bytes);
// "[2, 3]": a tensor shape for messages.
std::string ShapeText(const std::vector<int64_t>& shape);
// `text` as a JSON string literal, quotes included (quotes, backslashes, control characters
// escaped).
std::string JsonQuoted(const std::string& text);

}  // namespace trainer
