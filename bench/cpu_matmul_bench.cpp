// cpu_matmul_bench: GFLOP/s of the CPU backend's matmul kernels (forward, input gradient, weight
// gradient) on GPT-sized shapes, with the current OMP_NUM_THREADS; the best of the repeats.
// Usage: cpu_matmul_bench [N C OC [repeats]]   (default: 256 768 768, and the demo's shapes)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "model/cpu/cpu_kernels.h"

namespace {

// The fastest of `repeats` calls (after one warm-up): the least disturbed by other processes.
double SecondsPerCall(const std::function<void()>& fn, int repeats) {
  fn();
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best = std::min(best, elapsed.count());
  }
  return best;
}

void Bench(int64_t N, int C, int OC, int repeats) {
  std::vector<float> in(N * C), weight(static_cast<size_t>(OC) * C), out(N * OC), pre(N * OC),
      bias(OC), din(N * C), dweight(static_cast<size_t>(OC) * C), dbias(OC);
  unsigned state = 1;
  auto next = [&state] { return (state = state * 1664525u + 1013904223u) / 4294967296.f - 0.5f; };
  for (float& x : in) x = next();
  for (float& x : weight) x = next();
  for (float& x : out) x = next();  // used as dout below
  const double flops = 2.0 * N * C * OC;
  const double forward = SecondsPerCall(
      [&] {
        trainer::cpu::matmul_forward(out.data(), pre.data(), in.data(), weight.data(), bias.data(),
                                     N, C, OC, false);
      },
      repeats);
  const double input_grad = SecondsPerCall(
      [&] {
        trainer::cpu::gemm(din.data(), C, out.data(), OC, 1, weight.data(), C, 1, N, C, OC, false);
      },
      repeats);
  const double weight_grad = SecondsPerCall(
      [&] {
        trainer::cpu::gemm(dweight.data(), C, out.data(), 1, OC, in.data(), C, 1, OC, C, N, true);
      },
      repeats);
  std::printf(
      "N=%lld C=%d OC=%d threads=%d: forward %.1f GFLOP/s, din %.1f GFLOP/s, "
      "dweight %.1f GFLOP/s\n",
      static_cast<long long>(N), C, OC, omp_get_max_threads(), flops / forward / 1e9,
      flops / input_grad / 1e9, flops / weight_grad / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4) {
    Bench(std::atoll(argv[1]), std::atoi(argv[2]), std::atoi(argv[3]),
          argc >= 5 ? std::atoi(argv[4]) : 20);
    return 0;
  }
  Bench(256, 768, 768, 20);
  Bench(512, 128, 384, 50);    // tiny demo: qkv projection, hidden 128, B*T = 512
  Bench(1024, 256, 1024, 20);  // hidden 256: MLP up-projection
  Bench(1024, 256, 384, 20);   // hidden 256: LM head over the byte vocabulary (padded)
  return 0;
}
