// MetricsWriter: metrics.jsonl in Engine.output_dir (one JSON object per line, snake_case keys),
// written by rank 0, plus the human log line. Appends on resume.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trainer {

class MetricsWriter {
 public:
  static Status Open(const std::string& output_dir, bool enabled,
                     std::unique_ptr<MetricsWriter>* out);
  ~MetricsWriter();
  // {"step": 3, "loss": 4.2, ...} in the given order; values printed with %.6g unless integral.
  Status Write(const std::vector<std::pair<std::string, double>>& record);

 private:
  MetricsWriter() = default;
  FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace trainer
