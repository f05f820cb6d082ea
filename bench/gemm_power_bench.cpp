// cuBLASLt's GEMM candidates on a power-limited GPU: for GPT shapes, each of the heuristic's
// candidates is timed twice: the trainer's way (one warm-up, three runs on an idle GPU) and
// sustained (0.3 s of back-to-back GEMMs after 0.3 s of warm-up, when the GPU sits at its power
// limit), with the energy per GEMM from NVML's energy counter and the SM clock at the end.
// Answers: does the fastest candidate on an idle GPU stay the fastest at the power limit?
//   gemm_power_bench [part of a problem's name: only those problems]
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
};

uint32_t AlgoAttr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint32_t v = 0;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written);
  return v;
}

void Run(const Problem& p, cublasLtHandle_t lt, cudaStream_t stream, void* workspace,
         size_t workspace_bytes, const Nvml& nvml) {
  const cudaDataType_t d_type = p.f32_out_accumulate ? CUDA_R_32F : CUDA_R_16BF;
  const int64_t a_rows = p.transpose_a ? p.k : p.m, a_cols = p.transpose_a ? p.m : p.k;
  const int64_t b_rows = p.transpose_b ? p.n : p.k, b_cols = p.transpose_b ? p.k : p.n;
  void *a, *b, *d;
  BENCH_CHECK(cudaMalloc(&a, a_rows * a_cols * 2) == cudaSuccess);
  BENCH_CHECK(cudaMalloc(&b, b_rows * b_cols * 2) == cudaSuccess);
  BENCH_CHECK(cudaMalloc(&d, p.m * p.n * (p.f32_out_accumulate ? 4 : 2)) == cudaSuccess);
  {  // random bf16 operands in [-1, 1) (upper halves of an LCG), zero D
    std::vector<uint16_t> host(std::max(a_rows * a_cols, b_rows * b_cols));
    uint32_t s = 12345;
    for (auto& h : host) {
      s = s * 1664525u + 1013904223u;
      h = static_cast<uint16_t>(0x3c00 + ((s >> 16) & 0x7f)) ^ ((s >> 8) & 0x8000);
    }
    BENCH_CHECK(cudaMemcpy(a, host.data(), a_rows * a_cols * 2, cudaMemcpyHostToDevice) ==
                cudaSuccess);
    BENCH_CHECK(cudaMemcpy(b, host.data(), b_rows * b_cols * 2, cudaMemcpyHostToDevice) ==
                cudaSuccess);
    BENCH_CHECK(cudaMemset(d, 0, p.m * p.n * (p.f32_out_accumulate ? 4 : 2)) == cudaSuccess);
  }
  cublasLtMatmulDesc_t desc;
  BENCH_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
              CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t ta = p.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = p.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, a_rows, a_cols, a_rows);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, b_rows, b_cols, b_rows);
  cublasLtMatrixLayoutCreate(&ld, d_type, p.m, p.n, p.m);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace_bytes, sizeof(workspace_bytes));
  cublasLtMatmulHeuristicResult_t results[16];
  int found = 0;
  BENCH_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 16, results, &found) ==
              CUBLAS_STATUS_SUCCESS);
  const float alpha = 1.f, beta = p.f32_out_accumulate ? 1.f : 0.f;
  const double flops = 2.0 * p.m * p.n * p.k;
  std::printf("%s: m %lld n %lld k %lld, %d candidates\n", p.name, (long long)p.m, (long long)p.n,
              (long long)p.k, found);
  std::printf(
      "  cand  algo tile stages cluster splitk | idle ms  TFLOP/s | capped ms  TFLOP/s  "
      "mJ/GEMM  SM MHz\n");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < found; ++i) {
    const cublasLtMatmulAlgo_t& algo = results[i].algo;
    auto gemm = [&] {
      return cublasLtMatmul(lt, desc, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &algo, workspace,
                            workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS;
    };
    // Idle: let the GPU cool to its boost clock, then the trainer's tuning (1 + 3 runs).
    cudaDeviceSynchronize();
    usleep(300000);
    if (!gemm()) continue;
    cudaEventRecord(start, stream);
    for (int r = 0; r < 3; ++r) gemm();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float idle_ms = 0;
    cudaEventElapsedTime(&idle_ms, start, stop);
    idle_ms /= 3;
    // Sustained: warm to the power limit, then measure about 0.3 s.
    const int warm = static_cast<int>(300.0 / idle_ms) + 1,
              runs = static_cast<int>(300.0 / idle_ms) + 1;
    for (int r = 0; r < warm; ++r) gemm();
    cudaStreamSynchronize(stream);
    const unsigned long long e0 = nvml.Energy();
    cudaEventRecord(start, stream);
    for (int r = 0; r < runs; ++r) gemm();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    const unsigned long long e1 = nvml.Energy();
    const unsigned mhz = nvml.SmClock();
    float capped_ms = 0;
    cudaEventElapsedTime(&capped_ms, start, stop);
    capped_ms /= runs;
    std::printf("  %4d %5u %4u %6u %7u %6u | %7.3f %8.1f | %9.3f %8.1f %8.2f %7u\n", i,
                AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_ID),
                AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), idle_ms, flops / idle_ms / 1e9,
                capped_ms, flops / capped_ms / 1e9, double(e1 - e0) / runs, mhz);
    std::fflush(stdout);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
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
  };
  for (const Problem& p : problems)
    if (argc < 2 || std::strstr(p.name, argv[1]))
      Run(p, lt, stream, workspace, workspace_bytes, nvml);
  cublasLtDestroy(lt);
  return 0;
}
