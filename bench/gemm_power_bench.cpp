// cuBLASLt's GEMM candidates on a power-limited GPU: for GPT shapes, each of the heuristic's
// candidates is timed twice: the trainer's way (one warm-up, three runs on an idle GPU) and
// sustained (0.3 s of back-to-back GEMMs after 0.3 s of warm-up, when the GPU sits at its power
// limit), with the energy per GEMM from NVML's energy counter and the SM clock at the end.
// Answers: does the fastest candidate on an idle GPU stay the fastest at the power limit?
// The GELU gradient's problems compare cuBLASLt's DGELU epilogue with DGELU_BGRAD, which also
// sums the bias gradient. With --sweep, every configuration cuBLASLt accepts (each algorithm id's
// tiles, stages and custom options) is timed instead, idle, against the heuristic's best: does the
// heuristic leave faster kernels out of its list?
//   gemm_power_bench [--sweep] [part of a problem's name: only those problems]
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_check.h"
#include "gemm_operands.h"
#include "model/cuda/back_to_back_timing.h"

namespace {

using bench::AlgoAttr;
using bench::Heuristic;
using bench::Nvml;
using bench::Operands;
using bench::Problem;

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
              (long long)p.m, (long long)p.n, (long long)p.k, bench::EpilogueSuffix(p.epilogue),
              id_count, tried);
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
              (long long)p.n, (long long)p.k, bench::EpilogueSuffix(p.epilogue), candidates.size());
  std::printf(
      "  cand  algo tile stages cluster splitk | idle ms  TFLOP/s | capped ms  TFLOP/s  "
      "mJ/GEMM  SM MHz\n");
  for (size_t i = 0; i < candidates.size(); ++i) {
    const cublasLtMatmulAlgo_t& algo = candidates[i];
    const bench::PowerTiming t = bench::TimeIdleAndCapped(
        stream, [&] { return o.Gemm(lt, algo, workspace, workspace_bytes, stream); }, nvml);
    if (t.idle_ms <= 0) {
      std::printf("  %4zu: cuBLASLt refused to run this candidate\n", i);
      continue;
    }
    std::printf("  %4zu %5u %4u %6u %7u %6u | %7.3f %8.1f | %9.3f %8.1f %8.2f %7u\n", i,
                AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_ID),
                AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                AlgoAttr(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), t.idle_ms, flops / t.idle_ms / 1e9,
                t.capped_ms, flops / t.capped_ms / 1e9, t.mj_per_gemm, t.sm_mhz);
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
      {"350M qkv, forward", true, false, 3072, 32768, 1024, false, CUBLASLT_EPILOGUE_BIAS},
      {"350M MLP down, forward", true, false, 1024, 32768, 4096, false, CUBLASLT_EPILOGUE_BIAS},
      {"350M MLP up, input gradient", false, false, 1024, 32768, 4096, false},
      {"350M LM head, logits", true, false, 50304, 32768, 1024, false},
      // The GELU gradient at the bench's B=128 and 1.3B B=24: din^T = W_proj-as-stored dout^T
      // with GELU'(pre), and with fc's bias gradient in the epilogue too (the trainer sums din's
      // columns in a pass of its own instead: gelu_route_power_bench times that route).
      {"350M MLP down, gradient through GELU", false, false, 4096, 131072, 1024, false,
       CUBLASLT_EPILOGUE_DGELU},
      {"350M MLP down, gradient through GELU with bias gradient", false, false, 4096, 131072, 1024,
       false, CUBLASLT_EPILOGUE_DGELU_BGRAD},
      {"1.3B MLP down, gradient through GELU", false, false, 8192, 49152, 2048, false,
       CUBLASLT_EPILOGUE_DGELU},
      {"1.3B MLP down, gradient through GELU with bias gradient", false, false, 8192, 49152, 2048,
       false, CUBLASLT_EPILOGUE_DGELU_BGRAD},
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
