// MeasureDocuments (documents.h): one pass over the host's document starts.
#include "model/documents.h"

#include <algorithm>

namespace trainer {

DocumentShape MeasureDocuments(const int32_t* doc_starts, int B, int T) {
  DocumentShape shape;
  for (int b = 0; b < B; ++b) {
    const int32_t* starts = doc_starts + static_cast<int64_t>(b) * T;
    for (int t = 0; t < T; ++t) {
      if (starts[t] == t) ++shape.count;
      shape.longest = std::max(shape.longest, t - starts[t] + 1);
    }
  }
  return shape;
}

DocumentShape DocumentBucket(const DocumentShape& documents, int T) {
  auto power_of_two = [](int at_least) {
    int p = 1;
    while (p < at_least) p *= 2;
    return p;
  };
  DocumentShape bucket;
  bucket.count = power_of_two(documents.count);
  bucket.longest = std::min(T, power_of_two(std::max(64, documents.longest)));
  return bucket;
}

}  // namespace trainer
