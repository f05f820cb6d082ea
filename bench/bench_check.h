// BENCH_CHECK: the benchmark programs' one check. A benchmark measures and exits; on a failed
// call it names the expression, file and line, and exits 1. RelativeDiff: the figure that the
// benchmarks print when they check one route's output against another's.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define BENCH_CHECK(expr)                                                    \
  do {                                                                       \
    if (!(expr)) {                                                           \
      std::fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #expr); \
      std::exit(1);                                                          \
    }                                                                        \
  } while (0)

namespace bench {

// ||a - b|| / ||b|| (over every element; 1 stands in for a zero ||b||).
inline double RelativeDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d += (a[i] - b[i]) * (double)(a[i] - b[i]), n += (double)b[i] * b[i];
  return std::sqrt(d / (n > 0 ? n : 1));
}

}  // namespace bench
