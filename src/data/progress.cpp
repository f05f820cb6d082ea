// ProgressReporter (see progress.h).
#include "data/progress.h"

#include "common/log.h"

namespace trainer {

ProgressReporter::ProgressReporter(std::string label, int64_t total, FILE* out,
                                   double quiet_seconds, double interval_seconds)
    : label_(std::move(label)),
      total_(total),
      out_(out),
      quiet_seconds_(quiet_seconds),
      interval_seconds_(interval_seconds),
      start_(std::chrono::steady_clock::now()) {}

bool ProgressReporter::Update(int64_t done) {
  std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
  return UpdateAt(done, elapsed.count());
}

bool ProgressReporter::UpdateAt(int64_t done, double elapsed_seconds) {
  last_done_ = done;
  if (elapsed_seconds < quiet_seconds_) return false;
  if (last_print_ >= 0.0 && elapsed_seconds - last_print_ < interval_seconds_) return false;
  last_print_ = elapsed_seconds;
  std::fprintf(out_, "%s: %s\n", label_.c_str(), Describe(done, total_, elapsed_seconds).c_str());
  std::fflush(out_);
  return true;
}

void ProgressReporter::Finish() {
  if (last_print_ < 0.0) return;
  std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
  std::fprintf(out_, "%s: %s\n", label_.c_str(),
               Describe(last_done_, total_, elapsed.count()).c_str());
  std::fflush(out_);
}

std::string ProgressReporter::Describe(int64_t done, int64_t total, double elapsed_seconds) {
  const double mib = 1024.0 * 1024.0;
  double rate = elapsed_seconds > 0.0 ? done / elapsed_seconds : 0.0;
  double percent = total > 0 ? 100.0 * done / total : 100.0;
  std::string left = "time left unknown";
  if (rate > 0.0 && total >= done)
    left = StrFormat("about %.0fs left", static_cast<double>(total - done) / rate);
  return StrFormat("%.1f/%.1f MiB (%.1f%%), %.1f MiB/s, %s", done / mib, total / mib, percent,
                   rate / mib, left.c_str());
}

}  // namespace trainer
