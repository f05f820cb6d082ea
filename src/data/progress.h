// ProgressReporter: progress lines for long work (packing; usable by loading and saving too).
// Silent for the first ~2 seconds, then at most one line a second on stderr:
//   "<label>: 120.0/512.0 MiB (23.4%), 85.3 MiB/s, about 5s left"
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace trainer {

class ProgressReporter {
 public:
  // `total` bytes of work; lines go to `out` (stderr by default).
  ProgressReporter(std::string label, int64_t total, FILE* out = stderr, double quiet_seconds = 2.0,
                   double interval_seconds = 1.0);

  // Reports `done` bytes finished (by the steady clock). Returns true when it printed a line.
  bool Update(int64_t done);
  // The same with an explicit time in seconds since construction (for tests).
  bool UpdateAt(int64_t done, double elapsed_seconds);
  // One last line when any line was printed, so that the log ends at 100%.
  void Finish();

  // "120.0/512.0 MiB (23.4%), 85.3 MiB/s, about 5s left" for these numbers.
  static std::string Describe(int64_t done, int64_t total, double elapsed_seconds);

 private:
  std::string label_;
  int64_t total_;
  FILE* out_;
  double quiet_seconds_;
  double interval_seconds_;
  std::chrono::steady_clock::time_point start_;
  double last_print_ = -1.0;  // elapsed seconds at the last line; < 0 before the first
  int64_t last_done_ = 0;
};

}  // namespace trainer
