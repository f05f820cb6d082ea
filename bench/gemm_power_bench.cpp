// cuBLASLt's GEMM candidates on a power-limited GPU: for GPT shapes, each of the heuristic's
// candidates is timed twice: the trainer's way (one warm-up, three runs on an idle GPU) and
// sustained (0.3 s of back-to-back GEMMs after 0.3 s of warm-up, when the GPU sits at its power
// limit), with the energy per GEMM from NVML's energy counter and the SM clock at the end.
// Answers: does the fastest candidate on an idle GPU stay the fastest at the power limit?
// With --sweep, every configuration cuBLASLt accepts (each algorithm id's tiles, stages and custom
// options) is timed instead, idle, against the heuristic's best: does the heuristic leave faster
// kernels out of its list?
//   gemm_power_bench [--sweep] [part of a problem's name: only those problems]
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_check.h"
#include "model/cuda/back_to_back_timing.h"

namespace {

// The few NVML calls needed, loaded from the driver's library at run time.
struct Nvml {
  using Device = void*;
  int (*init)() = nullptr;
  int (*handle_by_index)(unsigned, Device*) = nullptr;
  int (*energy)(Device, unsigned long long*) = nullptr;  // mJ since driver load
  int (*clock)(Device, int, unsigned*) = nullptr;        // type 1: SM, MHz
  Device device = nullptr;
  bool ok = false;
  Nvml() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) return;
    init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    handle_by_index =
        reinterpret_cast<int (*)(unsigned, Device*)>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    energy = reinterpret_cast<int (*)(Device, unsigned long long*)>(
        dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption"));
    clock = reinterpret_cast<int (*)(Device, int, unsigned*)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    ok = init && handle_by_index && energy && clock && init() == 0 &&
         handle_by_index(0, &device) == 0;
  }
  unsigned long long Energy() const {
    unsigned long long mj = 0;
    if (ok) energy(device, &mj);
    return mj;
  }
  unsigned SmClock() const {
    unsigned mhz = 0;
    if (ok) clock(device, 1, &mhz);
    return mhz;
  }
};

struct Problem {
  const char* name;
  bool transpose_a, transpose_b;
  int64_t m, n, k;
  bool f32_out_accumulate;  // D f32 with beta 1 (the weight gradients)
  bool bias = false;        // a bf16 bias epilogue (the forward GEMMs)
};

uint32_t AlgoAttr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint32_t v = 0;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written);
  return v;
}

// A problem's operands (random bf16 in [-1, 1), D zeroed) and cuBLASLt descriptors.
struct Operands {
  void *a = nullptr, *b = nullptr, *d = nullptr, *bias = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  float alpha = 1.f, beta = 0.f;
  Operands(const Problem& p) {
    const int64_t a_rows = p.transpose_a ? p.k : p.m, a_cols = p.transpose_a ? p.m : p.k;
    const int64_t b_rows = p.transpose_b ? p.n : p.k, b_cols = p.transpose_b ? p.k : p.n;
    const size_t d_bytes = p.m * p.n * (p.f32_out_accumulate ? 4 : 2);
    BENCH_CHECK(cudaMalloc(&a, a_rows * a_cols * 2) == cudaSuccess);
    BENCH_CHECK(cudaMalloc(&b, b_rows * b_cols * 2) == cudaSuccess);
    BENCH_CHECK(cudaMalloc(&d, d_bytes) == cudaSuccess);
    BENCH_CHECK(cudaMalloc(&bias, p.m * 2) == cudaSuccess);
    std::vector<uint16_t> host(std::max({a_rows * a_cols, b_rows * b_cols, p.m}));
    uint32_t s = 12345;
    for (auto& h : host) {  // upper bits of an LCG: bf16 in [-1, 1)
      s = s * 1664525u + 1013904223u;
      h = static_cast<uint16_t>(0x3c00 + ((s >> 16) & 0x7f)) ^ ((s >> 8) & 0x8000);
    }
    BENCH_CHECK(cudaMemcpy(a, host.data(), a_rows * a_cols * 2, cudaMemcpyHostToDevice) ==
                cudaSuccess);
    BENCH_CHECK(cudaMemcpy(b, host.data(), b_rows * b_cols * 2, cudaMemcpyHostToDevice) ==
                cudaSuccess);
    BENCH_CHECK(cudaMemcpy(bias, host.data(), p.m * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    BENCH_CHECK(cudaMemset(d, 0, d_bytes) == cudaSuccess);
    BENCH_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
                CUBLAS_STATUS_SUCCESS);
    const cublasOperation_t ta = p.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = p.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    if (p.bias) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const int32_t bias_type = CUDA_R_16BF;
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                     sizeof(epilogue));
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                     sizeof(bias_type));
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    }
    const cudaDataType_t d_type = p.f32_out_accumulate ? CUDA_R_32F : CUDA_R_16BF;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, a_rows, a_cols, a_rows);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, b_rows, b_cols, b_rows);
    cublasLtMatrixLayoutCreate(&ld, d_type, p.m, p.n, p.m);
    beta = p.f32_out_accumulate ? 1.f : 0.f;
  }
  ~Operands() {
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    for (void* p : {a, b, d, bias}) cudaFree(p);
  }
  bool Gemm(cublasLtHandle_t lt, const cublasLtMatmulAlgo_t& algo, void* workspace,
            size_t workspace_bytes, cudaStream_t stream) const {
    return cublasLtMatmul(lt, desc, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &algo, workspace,
                          workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS;
  }
};

// The heuristic's candidates for the problem (at most 16).
std::vector<cublasLtMatmulAlgo_t> Heuristic(const Operands& o, cublasLtHandle_t lt,
                                            size_t workspace_bytes) {
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace_bytes, sizeof(workspace_bytes));
  cublasLtMatmulHeuristicResult_t results[16];
  int found = 0;
  BENCH_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, o.desc, o.la, o.lb, o.ld, o.ld, pref, 16, results,
                                             &found) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < found; ++i) algos.push_back(results[i].algo);
  return algos;
}

std::vector<uint32_t> CapIds(const cublasLtMatmulAlgo_t& algo,
                             cublasLtMatmulAlgoCapAttributes_t cap) {
  size_t bytes = 0;
  cublasLtMatmulAlgoCapGetAttribute(&algo, cap, nullptr, 0, &bytes);
  std::vector<uint32_t> ids(bytes / sizeof(uint32_t));
  if (!ids.empty()) cublasLtMatmulAlgoCapGetAttribute(&algo, cap, ids.data(), bytes, &bytes);
  if (ids.empty()) ids.push_back(0);  // undefined: the algorithm's only choice
  return ids;
}

void Describe(const cublasLtMatmulAlgo_t& algo) {
  std::printf("algo %3u tile %3u stages %3u custom %u cluster %2u splitk %u swizzle %u",
              AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_ID), AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
              AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
              AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
              AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
              AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
              AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING));
}

// Milliseconds per GEMM over `runs` back-to-back launches after one untimed; < 0 when it fails.
float TimeRuns(const Operands& o, cublasLtHandle_t lt, const cublasLtMatmulAlgo_t& algo,
               void* workspace, size_t workspace_bytes, cudaStream_t stream, int runs) {
  return trainer::cuda::TimeBackToBack(
      stream, [&] { return o.Gemm(lt, algo, workspace, workspace_bytes, stream); }, runs);
}

// Every configuration cuBLASLt accepts, timed (5 runs), then the 8 fastest and the heuristic's
// best again in 3 alternating rounds (their best round each).
void Sweep(const Problem& p, cublasLtHandle_t lt, cudaStream_t stream, void* workspace,
           size_t workspace_bytes) {
  const Operands o(p);
  const double flops = 2.0 * p.m * p.n * p.k;
  const cudaDataType_t d_type = p.f32_out_accumulate ? CUDA_R_32F : CUDA_R_16BF;
  int ids[128], id_count = 0;
  BENCH_CHECK(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                                       d_type, d_type, 128, ids,
                                       &id_count) == CUBLAS_STATUS_SUCCESS);
  std::vector<std::pair<float, cublasLtMatmulAlgo_t>> timed;
  int tried = 0;
  for (int i = 0; i < id_count; ++i) {
    std::fprintf(stderr, "  algorithm id %d: %d configurations run so far\n", ids[i], tried);
    cublasLtMatmulAlgo_t algo;
    if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, d_type,
                               d_type, ids[i], &algo) != CUBLAS_STATUS_SUCCESS)
      continue;
    int32_t custom_max = 0;
    size_t written = 0;
    cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max,
                                      sizeof(custom_max), &written);
    for (uint32_t tile : CapIds(algo, CUBLASLT_ALGO_CAP_TILE_IDS))
      for (uint32_t stages : CapIds(algo, CUBLASLT_ALGO_CAP_STAGES_IDS))
        for (int32_t custom = 0; custom <= custom_max; ++custom) {
          cublasLtMatmulAlgo_t c = algo;
          cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                               sizeof(tile));
          cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                               sizeof(stages));
          cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom,
                                               sizeof(custom));
          cublasLtMatmulHeuristicResult_t check = {};
          if (cublasLtMatmulAlgoCheck(lt, o.desc, o.la, o.lb, o.ld, o.ld, &c, &check) !=
                  CUBLAS_STATUS_SUCCESS ||
              check.workspaceSize > workspace_bytes)
            continue;
          ++tried;
          const float ms = TimeRuns(o, lt, c, workspace, workspace_bytes, stream, 5);
          if (ms > 0) timed.push_back({ms, c});
        }
  }
  std::sort(timed.begin(), timed.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  if (timed.size() > 8) timed.resize(8);
  const std::vector<cublasLtMatmulAlgo_t> heuristic = Heuristic(o, lt, workspace_bytes);
  std::vector<cublasLtMatmulAlgo_t> finalists;
  for (const auto& t : timed) finalists.push_back(t.second);
  // The heuristic's candidates too, each timed the same way.
  for (const auto& h : heuristic) finalists.push_back(h);
  std::vector<float> best(finalists.size(), 1e30f);
  for (int round = 0; round < 3; ++round)
    for (size_t i = 0; i < finalists.size(); ++i) {
      const float ms = TimeRuns(o, lt, finalists[i], workspace, workspace_bytes, stream, 5);
      if (ms > 0) best[i] = std::min(best[i], ms);
    }
  std::printf("%s: m %lld n %lld k %lld%s, %d algorithm ids, %d configurations run\n", p.name,
              (long long)p.m, (long long)p.n, (long long)p.k, p.bias ? " (bias)" : "", id_count,
              tried);
  for (size_t i = 0; i < finalists.size(); ++i) {
    std::printf("  %-9s %2zu ", i < timed.size() ? "sweep" : "heuristic",
                i < timed.size() ? i : i - timed.size());
    Describe(finalists[i]);
    std::printf(" | %7.3f ms %7.1f TFLOP/s\n", best[i], flops / best[i] / 1e9);
  }
  std::fflush(stdout);
}

// The heuristic's candidates, each timed idle (the trainer's way) and sustained.
void Run(const Problem& p, cublasLtHandle_t lt, cudaStream_t stream, void* workspace,
         size_t workspace_bytes, const Nvml& nvml) {
  const Operands o(p);
  const std::vector<cublasLtMatmulAlgo_t> candidates = Heuristic(o, lt, workspace_bytes);
  const double flops = 2.0 * p.m * p.n * p.k;
  std::printf("%s: m %lld n %lld k %lld%s, %zu candidates\n", p.name, (long long)p.m,
              (long long)p.n, (long long)p.k, p.bias ? " (bias)" : "", candidates.size());
  std::printf(
      "  cand  algo tile stages cluster splitk | idle ms  TFLOP/s | capped ms  TFLOP/s  "
      "mJ/GEMM  SM MHz\n");
  for (size_t i = 0; i < candidates.size(); ++i) {
    const cublasLtMatmulAlgo_t& algo = candidates[i];
    // Idle: let the GPU cool to its boost clock, then three back-to-back runs.
    cudaDeviceSynchronize();
    usleep(300000);
    const float idle_ms = TimeRuns(o, lt, algo, workspace, workspace_bytes, stream, 3);
    if (idle_ms <= 0) continue;
    // Sustained: warm to the power limit, then measure about 0.3 s.
    const int runs = static_cast<int>(300.0 / idle_ms) + 1;
    TimeRuns(o, lt, algo, workspace, workspace_bytes, stream, runs);
    const unsigned long long e0 = nvml.Energy();
    const float capped_ms = TimeRuns(o, lt, algo, workspace, workspace_bytes, stream, runs);
    const unsigned long long e1 = nvml.Energy();
    const unsigned mhz = nvml.SmClock();
    std::printf("  %4zu %5u %4u %6u %7u %6u | %7.3f %8.1f | %9.3f %8.1f %8.2f %7u\n", i,
                AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_ID),
                AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), idle_ms, flops / idle_ms / 1e9,
                capped_ms, flops / capped_ms / 1e9, double(e1 - e0) / (runs + 1), mhz);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Nvml nvml;
  std::printf("NVML energy counter: %s\n", nvml.ok ? "yes" : "no");
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreate(&stream) == cudaSuccess);
  cublasLtHandle_t lt;
  BENCH_CHECK(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS);
  const size_t workspace_bytes = 32u << 20;
  void* workspace;
  BENCH_CHECK(cudaMalloc(&workspace, workspace_bytes) == cudaSuccess);
  // Column-major, as the trainer calls cuBLASLt (y^T = W^T-as-stored x^T; dW^T += x^T dout).
  const Problem problems[] = {
      {"124M MLP up, forward (x W^T)", true, false, 3072, 32768, 768, false},
      {"124M MLP down, forward", true, false, 768, 32768, 3072, false},
      {"124M MLP up, weight gradient", false, true, 768, 3072, 32768, true},
      {"124M LM head, logits", true, false, 50304, 32768, 768, false},
      {"350M MLP up, forward", true, false, 4096, 16384, 1024, false},
      {"1.3B MLP up, forward", true, false, 8192, 32768, 2048, false},
      {"1.3B MLP up, weight gradient", false, true, 2048, 8192, 32768, true},
      {"350M qkv, forward", true, false, 3072, 32768, 1024, false, true},
      {"350M MLP down, forward", true, false, 1024, 32768, 4096, false, true},
      {"350M MLP up, input gradient", false, false, 1024, 32768, 4096, false},
      {"350M LM head, logits", true, false, 50304, 32768, 1024, false},
  };
  const bool sweep = argc > 1 && std::strcmp(argv[1], "--sweep") == 0;
  const char* filter = argc > 1 + sweep ? argv[1 + sweep] : "";
  for (const Problem& p : problems) {
    if (!std::strstr(p.name, filter)) continue;
    if (sweep)
      Sweep(p, lt, stream, workspace, workspace_bytes);
    else
      Run(p, lt, stream, workspace, workspace_bytes, nvml);
  }
  cublasLtDestroy(lt);
  return 0;
}
