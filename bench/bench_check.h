// BENCH_CHECK: the benchmark programs' one check. A benchmark measures and exits; on a failed
// call it names the expression, file and line, and exits 1.
#pragma once

#include <cstdio>
#include <cstdlib>

#define BENCH_CHECK(expr)                                                    \
  do {                                                                       \
    if (!(expr)) {                                                           \
      std::fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #expr); \
      std::exit(1);                                                          \
    }                                                                        \
  } while (0)
