// What the GEMM benchmarks share: NVML's energy counter and SM clock (loaded from the driver's
// library at run time), a GEMM's timing idle and at the power limit, and one cuBLASLt problem
// (bf16 operands, random values, its descriptors) with the heuristic's candidates for it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "bench_check.h"
#include "model/cuda/back_to_back_timing.h"

namespace bench {

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

// A GEMM (`op`, true when it launched) timed idle (after 0.3 s of rest, one untimed run and three
// timed: the trainer's count when it times candidates on first use), and at the power limit (about
// 0.3 s of back-to-back runs as warm-up, then as many again measured), with the energy per GEMM
// over the measured runs and the SM clock at their end. idle_ms < 0 when a launch failed.
struct PowerTiming {
  float idle_ms = -1.f, capped_ms = -1.f;
  double mj_per_gemm = 0;
  unsigned sm_mhz = 0;
};

inline PowerTiming TimeIdleAndCapped(cudaStream_t stream, const std::function<bool()>& op,
                                     const Nvml& nvml) {
  PowerTiming t;
  cudaDeviceSynchronize();
  usleep(300000);
  t.idle_ms = trainer::cuda::TimeBackToBack(stream, op, 3);
  if (t.idle_ms <= 0) return t;
  const int runs = static_cast<int>(300.0 / t.idle_ms) + 1;
  trainer::cuda::TimeBackToBack(stream, op, runs);
  const unsigned long long e0 = nvml.Energy();
  t.capped_ms = trainer::cuda::TimeBackToBack(stream, op, runs);
  const unsigned long long e1 = nvml.Energy();
  t.mj_per_gemm = double(e1 - e0) / (runs + 1);  // the untimed run's energy is counted too
  t.sm_mhz = nvml.SmClock();
  return t;
}

struct Problem {
  const char* name;
  bool transpose_a, transpose_b;
  int64_t m, n, k;
  bool f32_out_accumulate;  // D f32 with beta 1 (the weight gradients)
  // CUBLASLT_EPILOGUE_BIAS: a bf16 bias (the forward GEMMs); DGELU: GELU'(pre) applied to D (bf16),
  // pre an aux input of D's shape (the GELU gradient); DGELU_BGRAD: that, and the bias gradient
  // (D's row sums, bf16) into the bias.
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
};

inline bool HasBias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
inline bool HasAux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
// " (bias)", " (DGELU)", " (DGELU_BGRAD)", or "" without an epilogue: for a problem's heading.
inline const char* EpilogueSuffix(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS          ? " (bias)"
         : e == CUBLASLT_EPILOGUE_DGELU       ? " (DGELU)"
         : e == CUBLASLT_EPILOGUE_DGELU_BGRAD ? " (DGELU_BGRAD)"
                                              : "";
}

inline uint32_t AlgoAttr(const cublasLtMatmulAlgo_t& algo,
                         cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint32_t v = 0;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written);
  return v;
}

// A problem's operands (random bf16 in [-1, 1), D zeroed) and cuBLASLt descriptors.
struct Operands {
  void *a = nullptr, *b = nullptr, *d = nullptr, *bias = nullptr, *aux = nullptr;
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
    if (HasAux(p.epilogue)) {  // the pre-activation: the B operand's values, repeated
      BENCH_CHECK(cudaMalloc(&aux, d_bytes) == cudaSuccess);
      for (size_t at = 0; at < d_bytes; at += b_rows * b_cols * 2)
        BENCH_CHECK(cudaMemcpy(static_cast<char*>(aux) + at, b,
                               std::min<size_t>(b_rows * b_cols * 2, d_bytes - at),
                               cudaMemcpyDeviceToDevice) == cudaSuccess);
    }
    BENCH_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
                CUBLAS_STATUS_SUCCESS);
    const cublasOperation_t ta = p.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = p.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epilogue,
                                   sizeof(p.epilogue));
    if (HasBias(p.epilogue)) {  // cuBLASLt refuses to run DGELU when given a bias pointer
      const int32_t bias_type = CUDA_R_16BF;
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                     sizeof(bias_type));
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    }
    if (HasAux(p.epilogue)) {
      const int64_t aux_ld = p.m;
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                     sizeof(aux));
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                     sizeof(aux_ld));
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
    for (void* p : {a, b, d, bias, aux}) cudaFree(p);
  }
  // Tells cuBLASLt's heuristic that only `sms` SMs are free (another stream holds the rest).
  void TargetSms(int32_t sms) {
    BENCH_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms,
                                               sizeof(sms)) == CUBLAS_STATUS_SUCCESS);
  }
  bool Gemm(cublasLtHandle_t lt, const cublasLtMatmulAlgo_t& algo, void* workspace,
            size_t workspace_bytes, cudaStream_t stream) const {
    return cublasLtMatmul(lt, desc, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &algo, workspace,
                          workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS;
  }
};

// The heuristic's candidates for the problem (at most 16).
inline std::vector<cublasLtMatmulAlgo_t> Heuristic(const Operands& o, cublasLtHandle_t lt,
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

}  // namespace bench
