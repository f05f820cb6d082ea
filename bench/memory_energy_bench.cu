// Memory-bound kernels at the power limit. A training step on an H200 runs at the 700 W limit, so
// its speed is a matter of energy per step: would a streaming kernel (the shape of AdamW, the
// LayerNorms, the cross-entropy) that runs on fewer SMs move the same bytes with less energy, and
// would a GEMM-heavy mix (cuBLASLt GEMMs with streaming passes between them, as in a step) then run
// faster, the GEMMs taking the power the streaming passes no longer draw?
//   1. alone: the streaming kernel (y = a x + y, 16-byte accesses) on S SMs (one 1024-thread block
//      per SM, held there by its shared memory) for S from 132 down, and as an ordinary launch
//      (8 blocks of 256 threads per SM): GB/s, joules per GB (NVML's energy counter), watts, clock;
//   2. the mix: 4 GEMMs and one streaming pass per round (~8-12% of its time), 2 s per variant
//      after 0.5 s of warm-up, two alternating rounds: rounds per second, energy per round, clock.
//      The pass after the GEMMs (each launch of part 1), beside them on a second stream (ordinary,
//      or on S SMs with the GEMMs planned for the others: CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET),
//      or none.
//   memory_energy_bench [streaming MB per array, default 256] [parts, default 12]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench_check.h"
#include "gemm_operands.h"

namespace {

constexpr int kUnroll = 4;

// y = a x + y over n4 float4s, grid-stride, kUnroll 16-byte loads of each array in flight.
__global__ void __launch_bounds__(1024) StreamAxpy(const float4* x, float4* y, size_t n4, float a) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n4; i += kUnroll * stride) {
    float4 xs[kUnroll], ys[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      xs[u] = x[i + u * stride];
      ys[u] = y[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      y[i + u * stride] = make_float4(a * xs[u].x + ys[u].x, a * xs[u].y + ys[u].y,
                                      a * xs[u].z + ys[u].z, a * xs[u].w + ys[u].w);
  }
  for (; i < n4; i += stride) {
    const float4 xv = x[i], yv = y[i];
    y[i] = make_float4(a * xv.x + yv.x, a * xv.y + yv.y, a * xv.z + yv.z, a * xv.w + yv.w);
  }
}

// One way to launch the streaming kernel: on `sms` SMs (one big block each), or ordinary (0).
struct StreamLaunch {
  int sms;
  const char* Name() const {
    static char name[32];
    if (sms == 0) return "ordinary (8 x 256 per SM)";
    std::snprintf(name, sizeof(name), "%d SMs x 1024", sms);
    return name;
  }
};

constexpr int kPinningSharedBytes = 150 << 10;  // > half an SM's shared memory: one block per SM

struct Stream {
  float4 *x = nullptr, *y = nullptr;
  size_t n4 = 0;
  int sm_count = 0;
  explicit Stream(size_t bytes) : n4(bytes / 16) {
    BENCH_CHECK(cudaMalloc(&x, bytes) == cudaSuccess);
    BENCH_CHECK(cudaMalloc(&y, bytes) == cudaSuccess);
    BENCH_CHECK(cudaMemset(x, 0, bytes) == cudaSuccess);
    BENCH_CHECK(cudaMemset(y, 0, bytes) == cudaSuccess);
    BENCH_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0) ==
                cudaSuccess);
    BENCH_CHECK(cudaFuncSetAttribute(StreamAxpy, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     kPinningSharedBytes) == cudaSuccess);
  }
  ~Stream() {
    cudaFree(x);
    cudaFree(y);
  }
  double Bytes() const { return 3.0 * 16 * n4; }  // read x and y, write y
  void Launch(StreamLaunch l, cudaStream_t s) const {
    if (l.sms == 0)
      StreamAxpy<<<8 * sm_count, 256, 0, s>>>(x, y, n4, 0.5f);
    else
      StreamAxpy<<<l.sms, 1024, kPinningSharedBytes, s>>>(x, y, n4, 0.5f);
    BENCH_CHECK(cudaGetLastError() == cudaSuccess);  // a refused launch would time nothing
  }
};

double Seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

struct Measured {
  double seconds = 0, joules = 0, mean_mhz = 0;
  long rounds = 0;
};

// Runs `round` (which enqueues work on `s`) for `seconds`, syncing every `per_sync` rounds to
// sample the SM clock, after `warm_seconds` of the same.
template <typename Round>
Measured Sustain(const bench::Nvml& nvml, cudaStream_t s, double warm_seconds, double seconds,
                 int per_sync, const Round& round) {
  for (double t0 = Seconds(); Seconds() - t0 < warm_seconds;) {
    for (int r = 0; r < per_sync; ++r) round();
    BENCH_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  }
  Measured m;
  long samples = 0;
  const unsigned long long e0 = nvml.Energy();
  const double t0 = Seconds();
  while (Seconds() - t0 < seconds) {
    for (int r = 0; r < per_sync; ++r) round();
    m.rounds += per_sync;
    BENCH_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    m.mean_mhz += nvml.SmClock();
    ++samples;
  }
  m.seconds = Seconds() - t0;
  m.joules = (nvml.Energy() - e0) / 1e3;
  m.mean_mhz /= samples;
  return m;
}

}  // namespace

// One way to run a round of the mix: 4 GEMMs, and the streaming pass after them (on the same
// stream), beside them (on a second stream, launched first so that it holds its SMs), or none.
struct MixVariant {
  std::string name;
  StreamLaunch pass;
  enum class Pass { kNone, kAfter, kBeside } where;
  std::unique_ptr<bench::Operands> gemm;
  std::vector<cublasLtMatmulAlgo_t> algos;
};

int main(int argc, char** argv) {
  const size_t mb = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
  const std::string sections = argc > 2 ? argv[2] : "12";
  bench::Nvml nvml;
  std::printf("NVML energy counter: %s\n", nvml.ok ? "yes" : "no");
  cudaStream_t s, side;
  BENCH_CHECK(cudaStreamCreate(&s) == cudaSuccess);
  BENCH_CHECK(cudaStreamCreate(&side) == cudaSuccess);
  const Stream stream(mb << 20);
  std::vector<StreamLaunch> launches = {{0}};
  for (int sms : {132, 99, 66, 44, 33})
    if (sms <= stream.sm_count) launches.push_back({sms});

  if (sections.find('1') != std::string::npos) {
    std::printf("1. the streaming kernel alone, %zu MB per array (%.0f MB moved per pass)\n", mb,
                stream.Bytes() / 1e6);
    std::printf("  %-26s %9s %8s %7s %7s\n", "launch", "GB/s", "J/GB", "W", "SM MHz");
    for (const StreamLaunch& l : launches) {
      const Measured m = Sustain(nvml, s, 0.3, 1.0, 20, [&] { stream.Launch(l, s); });
      const double gb = stream.Bytes() * m.rounds / 1e9;
      std::printf("  %-26s %9.1f %8.3f %7.1f %7.0f\n", l.Name(), gb / m.seconds, m.joules / gb,
                  m.joules / m.seconds, m.mean_mhz);
      std::fflush(stdout);
    }
  }
  if (sections.find('2') == std::string::npos) return 0;

  // 350M's MLP up, forward (32768 tokens): ~0.4 ms a GEMM at the power limit.
  const bench::Problem gemm_problem = {
      "350M MLP up, forward", true, false, 4096, 32768, 1024, false};
  cublasLtHandle_t lt;
  BENCH_CHECK(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS);
  const size_t workspace_bytes = 32u << 20;
  void* workspace;
  BENCH_CHECK(cudaMalloc(&workspace, workspace_bytes) == cudaSuccess);
  std::vector<MixVariant> variants;
  auto add = [&](StreamLaunch pass, MixVariant::Pass where) {
    MixVariant v{where == MixVariant::Pass::kNone    ? std::string("4 GEMMs alone")
                 : where == MixVariant::Pass::kAfter ? std::string("after: ") + pass.Name()
                                                     : std::string("beside: ") + pass.Name(),
                 pass,
                 where,
                 std::make_unique<bench::Operands>(gemm_problem),
                 {}};
    // Beside a pass pinned to S SMs, the GEMMs are planned for the others.
    if (where == MixVariant::Pass::kBeside && pass.sms > 0)
      v.gemm->TargetSms(stream.sm_count - pass.sms);
    v.algos = bench::Heuristic(*v.gemm, lt, workspace_bytes);
    BENCH_CHECK(!v.algos.empty());
    variants.push_back(std::move(v));
  };
  add({0}, MixVariant::Pass::kNone);
  for (const StreamLaunch& l : launches) add(l, MixVariant::Pass::kAfter);
  for (int sms : {0, 8, 16, 33})
    if (sms <= stream.sm_count) add({sms}, MixVariant::Pass::kBeside);
  cudaEvent_t fork, join;
  BENCH_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess);
  BENCH_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess);
  const double flops = 2.0 * gemm_problem.m * gemm_problem.n * gemm_problem.k;
  std::printf("2. the mix: 4 GEMMs (%s, %.0f GFLOP each) and one streaming pass per round\n",
              gemm_problem.name, flops / 1e9);
  std::printf("  %-34s %5s %9s %9s %7s %7s\n", "pass", "round", "rounds/s", "J/round", "W",
              "SM MHz");
  for (int rep = 0; rep < 2; ++rep)
    for (const MixVariant& v : variants) {
      const bool beside = v.where == MixVariant::Pass::kBeside;
      const Measured m = Sustain(nvml, s, 0.5, 2.0, 10, [&] {
        if (beside) {
          BENCH_CHECK(cudaEventRecord(fork, s) == cudaSuccess);
          BENCH_CHECK(cudaStreamWaitEvent(side, fork) == cudaSuccess);
          stream.Launch(v.pass, side);
          BENCH_CHECK(cudaEventRecord(join, side) == cudaSuccess);
        }
        for (int g = 0; g < 4; ++g)
          BENCH_CHECK(v.gemm->Gemm(lt, v.algos[0], workspace, workspace_bytes, s));
        if (beside)
          BENCH_CHECK(cudaStreamWaitEvent(s, join) == cudaSuccess);
        else if (v.where == MixVariant::Pass::kAfter)
          stream.Launch(v.pass, s);
      });
      std::printf("  %-34s %5d %9.2f %9.3f %7.1f %7.0f\n", v.name.c_str(), rep + 1,
                  m.rounds / m.seconds, m.joules / m.rounds, m.joules / m.seconds, m.mean_mhz);
      std::fflush(stdout);
    }
  cudaFree(workspace);
  cublasLtDestroy(lt);
  return 0;
}
