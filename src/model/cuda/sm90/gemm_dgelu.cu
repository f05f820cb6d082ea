// The GELU-gradient GEMM on Hopper (sm_90a): din (M,N) = GELU'(pre) * (dout (M,K) w_t (N,K)^T).
// A persistent grid, one CTA per SM, takes 128 x 256 output tiles in turn. In warpgroup 0, thread
// 0 loads 64-wide k-blocks of dout and w_t by TMA into a ring of kStages stages (128B swizzle);
// warps 1-3 load the tile's pre (64 KB, evict-first in the L2) into its own buffer and turn it
// into GELU'(pre) (f16) in place while the tile multiplies. Warpgroups 1 and 2 multiply the
// tile's two 64 x 256 halves by wgmma (f32 accumulators in registers), so that their epilogue,
// which the tensor cores wait for, is one multiply per element: din is formed in place of the
// slopes and one thread stores it by TMA. The buffer goes back to warps 1-3 once the store has
// read it, during the next tile's first k-block.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>

#include "model/cuda/sm90/gemm_dgelu.h"
#include "model/cuda/sm90/hopper_primitives.cuh"

namespace trainer {
namespace cuda {
namespace {

using namespace sm90;

constexpr int kBlockM = 128, kBlockN = 256, kBlockK = 64, kStages = 3;
constexpr int kThreads = 384;                            // warpgroup 0 loads, 1 and 2 multiply
constexpr int kATileBytes = kBlockM * kBlockK * 2;       // 16 KB
constexpr int kBTileBytes = kBlockN * kBlockK * 2;       // 32 KB
constexpr int kPreBoxCols = 64;                          // one 128-byte swizzle row
constexpr int kPreBoxBytes = kBlockM * kPreBoxCols * 2;  // 16 KB
constexpr int kPreTileBytes = kBlockM * kBlockN * 2;     // 64 KB
constexpr int kBarrierBytes = 256;
constexpr int kSlopeThreads = 96;  // warps 1-3 of the loading warpgroup
constexpr int kLoaderRegisters = 56, kMultiplierRegisters = 224;  // 128 x 56 + 256 x 224 <= 64K
constexpr int kSharedBytes =
    kStages * (kATileBytes + kBTileBytes) + kPreTileBytes + kBarrierBytes + 1024;  // + alignment

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// GELU'(x) for the tanh approximation, two at a time in f16: 0.5 (1 + t) + 0.5 x (1 - t^2) u'(x),
// t = tanh(u(x)), u = sqrt(2/pi) (x + 0.044715 x^3), tanh by the hardware's approximation. x is
// clamped to [-10, 10] first (f16 range for x^3; GELU' there is 0 or 1 to f16 precision). The
// slope's error, ~1e-3 relative, is below the bf16 rounding of din.
__device__ __forceinline__ uint32_t GeluSlopeF16x2(uint32_t bf16_pair) {
  const float2 xf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bf16_pair));
  const __half2 x =
      __floats2half2_rn(fminf(fmaxf(xf.x, -10.f), 10.f), fminf(fmaxf(xf.y, -10.f), 10.f));
  const __half2 x2 = __hmul2(x, x);
  const __half2 u = __hmul2(
      x, __hfma2(__float2half2_rn(kGeluScale * kGeluCubic), x2, __float2half2_rn(kGeluScale)));
  uint32_t t_bits;
  asm("tanh.approx.f16x2 %0, %1;" : "=r"(t_bits) : "r"(*reinterpret_cast<const uint32_t*>(&u)));
  const __half2 t = *reinterpret_cast<const __half2*>(&t_bits);
  const __half2 half_x_du = __hmul2(x, __hfma2(__float2half2_rn(1.5f * kGeluScale * kGeluCubic), x2,
                                               __float2half2_rn(0.5f * kGeluScale)));
  const __half2 one = __float2half2_rn(1.f), half = __float2half2_rn(0.5f);
  const __half2 slope = __hfma2(half_x_du, __hfma2(__hneg2(t), t, one), __hfma2(half, t, half));
  return *reinterpret_cast<const uint32_t*>(&slope);
}

__global__ void __launch_bounds__(kThreads, 1)
    GemmDgeluKernel(const __grid_constant__ CUtensorMap dout_map,
                    const __grid_constant__ CUtensorMap w_map,
                    const __grid_constant__ CUtensorMap pre_map,
                    const __grid_constant__ CUtensorMap din_map, int m_blocks, int n_blocks,
                    int k_blocks) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t shared_raw[];
  uint8_t* shared = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(shared_raw) + 1023) &
                                               ~static_cast<uintptr_t>(1023));
  uint8_t* a_tiles = shared;                            // (kStages, 128, 64)
  uint8_t* b_tiles = a_tiles + kStages * kATileBytes;   // (kStages, 256, 64)
  uint8_t* pre_tile = b_tiles + kStages * kBTileBytes;  // 4 boxes of (128, 64)
  uint64_t* full = reinterpret_cast<uint64_t*>(pre_tile + kPreTileBytes);
  uint64_t* empty = full + kStages;
  uint64_t* pre_full = empty + kStages;
  uint64_t* pre_free = pre_full + 1;
  uint64_t* slope_ready = pre_free + 1;

  const int warpgroup = threadIdx.x / 128;
  const int lane = threadIdx.x % 32;
  const int tiles = m_blocks * n_blocks;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      BarrierInit(&full[s], 1);
      BarrierInit(&empty[s], 8);  // lane 0 of each consumer warp
    }
    BarrierInit(pre_full, 1);
    BarrierInit(pre_free, 1);
    BarrierInit(slope_ready, kSlopeThreads);
    BarrierInitFence();
    TmaPrefetchMap(&dout_map);
    TmaPrefetchMap(&w_map);
    TmaPrefetchMap(&pre_map);
    TmaPrefetchMap(&din_map);
  }
  __syncthreads();

  if (warpgroup == 0) RegistersDecrease<kLoaderRegisters>();  // by the whole warpgroup
  if (warpgroup == 0 && threadIdx.x >= 32) {  // warps 1-3: pre, then GELU'(pre) in place
    uint32_t pre_phase = 0;
    const uint64_t evict_first = L2EvictFirstPolicy();
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      if (threadIdx.x == 32) {
        const int m0 = tile / n_blocks * kBlockM, n0 = tile % n_blocks * kBlockN;
        BarrierWait(pre_free, pre_phase ^ 1);
        BarrierArriveExpectBytes(pre_full, kPreTileBytes);
        for (int box = 0; box < kBlockN / kPreBoxCols; ++box)
          TmaLoad2dHinted(pre_tile + box * kPreBoxBytes, &pre_map, pre_full, n0 + box * kPreBoxCols,
                          m0, evict_first);
      }
      BarrierWait(pre_full, pre_phase);
      pre_phase ^= 1;
      for (int c = threadIdx.x - 32; c < kPreTileBytes / 16; c += kSlopeThreads) {
        uint4* p = reinterpret_cast<uint4*>(pre_tile) + c;  // 8 elements; the swizzle is moot
        uint4 v = *p;
        v.x = GeluSlopeF16x2(v.x), v.y = GeluSlopeF16x2(v.y);
        v.z = GeluSlopeF16x2(v.z), v.w = GeluSlopeF16x2(v.w);
        *p = v;
      }
      BarrierArrive(slope_ready);
    }
    return;
  }
  if (warpgroup == 0) {  // the loader
    if (threadIdx.x != 0) return;
    int stage = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const int m0 = tile / n_blocks * kBlockM, n0 = tile % n_blocks * kBlockN;
      for (int kb = 0; kb < k_blocks; ++kb) {
        BarrierWait(&empty[stage], phase ^ 1);
        BarrierArriveExpectBytes(&full[stage], kATileBytes + kBTileBytes);
        TmaLoad2d(a_tiles + stage * kATileBytes, &dout_map, &full[stage], kb * kBlockK, m0);
        TmaLoad2d(b_tiles + stage * kBTileBytes, &w_map, &full[stage], kb * kBlockK, n0);
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
    }
    return;
  }

  // The multipliers: warpgroup 1 takes the tile's rows 0-63, warpgroup 2 rows 64-127.
  RegistersIncrease<kMultiplierRegisters>();
  const int half = warpgroup - 1;
  const int warp = (threadIdx.x % 128) / 32;
  const bool store_thread = threadIdx.x == 128;
  float acc[128];
  int stage = 0, previous = 0;
  uint32_t phase = 0, pre_phase = 0;
  bool store_pending = false;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int m0 = tile / n_blocks * kBlockM, n0 = tile % n_blocks * kBlockN;
    for (int kb = 0; kb < k_blocks; ++kb) {
      BarrierWait(&full[stage], phase);
      const uint64_t desc_a =
          WgmmaDescriptorSwizzle128(a_tiles + stage * kATileBytes + half * 64 * 128);
      const uint64_t desc_b = WgmmaDescriptorSwizzle128(b_tiles + stage * kBTileBytes);
#pragma unroll
      for (int i = 0; i < 128; ++i) WgmmaFenceOperand(acc[i]);
      WgmmaFence();
#pragma unroll
      for (int k = 0; k < kBlockK / 16; ++k)  // 16 elements = 32 bytes = 2 in the address field
        WgmmaM64N256K16(acc, desc_a + 2 * k, desc_b + 2 * k, kb > 0 || k > 0);
      WgmmaCommit();
#pragma unroll
      for (int i = 0; i < 128; ++i) WgmmaFenceOperand(acc[i]);
      if (kb > 0) {
        WgmmaWait<1>();
        if (lane == 0) BarrierArrive(&empty[previous]);
      }
      if (kb == 0 && store_pending) {  // the last tile's store has had a k-block to read pre
        if (store_thread) {
          TmaStoreWaitRead();
          BarrierArrive(pre_free);
        }
        store_pending = false;
      }
      previous = stage;
      if (++stage == kStages) stage = 0, phase ^= 1;
    }
    WgmmaWait<0>();
#pragma unroll
    for (int i = 0; i < 128; ++i) WgmmaFenceOperand(acc[i]);
    if (lane == 0) BarrierArrive(&empty[previous]);

    // din = acc * GELU'(pre), in place of the slopes. acc[4j + 2h + e] is row 16 warp + lane / 4
    // + 8h, column 8j + 2 (lane % 4) + e of this half; the TMA's 128B swizzle put a box row's
    // 16-byte chunk c at c ^ (row % 8), and row % 8 = lane / 4 here.
    BarrierWait(slope_ready, pre_phase);
    pre_phase ^= 1;
    const int row = half * 64 + warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int box = j / 8, chunk = (j % 8) ^ (lane / 4);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint8_t* p =
            pre_tile + box * kPreBoxBytes + (row + 8 * h) * 128 + chunk * 16 + (lane % 4) * 4;
        const float2 slope = __half22float2(*reinterpret_cast<const __half2*>(p));
        *reinterpret_cast<__nv_bfloat162*>(p) =
            __floats2bfloat162_rn(acc[4 * j + 2 * h] * slope.x, acc[4 * j + 2 * h + 1] * slope.y);
      }
    }
    FenceSharedForAsyncProxy();
    NamedBarrierSync(1, 256);
    if (store_thread) {
      for (int box = 0; box < kBlockN / kPreBoxCols; ++box)
        TmaStore2d(&din_map, pre_tile + box * kPreBoxBytes, n0 + box * kPreBoxCols, m0);
      TmaStoreCommit();
    }
    store_pending = true;
  }
  if (store_thread) TmaStoreWaitAll();
#endif
}

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled from the driver, found through the runtime (no link to libcuda).
EncodeTiledFn EncodeTiled() {
  static EncodeTiledFn fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiledFn>(p);
  });
  return fn;
}

// A row-major bf16 (rows, cols) matrix as boxes of (box_rows, 64) with 128B swizzle.
bool MakeMap(CUtensorMap* map, const void* base, int64_t rows, int64_t cols, uint32_t box_rows) {
  EncodeTiledFn encode = EncodeTiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {64, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides,
                box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

struct DeviceInfo {
  bool sm90 = false;
  int sms = 0;
};

DeviceInfo CurrentDevice() {
  DeviceInfo info;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return info;
  info.sm90 = major == 9 && minor == 0;
  return info;
}

bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

bool GemmDgeluSupported(const GemmDgeluProblem& p) {
  return CurrentDevice().sm90 && EncodeTiled() != nullptr && p.m > 0 && p.n > 0 && p.k > 0 &&
         p.m % kBlockM == 0 && p.n % kBlockN == 0 && p.k % kBlockK == 0 && p.m < (1ll << 31) &&
         p.n < (1ll << 31) && p.k < (1ll << 31) && Aligned16(p.dout) && Aligned16(p.w_t) &&
         Aligned16(p.pre) && Aligned16(p.din);
}

cudaError_t LaunchGemmDgelu(const GemmDgeluProblem& p, cudaStream_t stream) {
  if (!GemmDgeluSupported(p)) return cudaErrorNotSupported;
  CUtensorMap dout_map, w_map, pre_map, din_map;
  if (!MakeMap(&dout_map, p.dout, p.m, p.k, kBlockM) ||
      !MakeMap(&w_map, p.w_t, p.n, p.k, kBlockN) || !MakeMap(&pre_map, p.pre, p.m, p.n, kBlockM) ||
      !MakeMap(&din_map, p.din, p.m, p.n, kBlockM))
    return cudaErrorInvalidValue;
  static std::once_flag once;
  static cudaError_t attribute = cudaSuccess;
  std::call_once(once, [] {
    attribute = cudaFuncSetAttribute(GemmDgeluKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     kSharedBytes);
  });
  if (attribute != cudaSuccess) return attribute;
  const int m_blocks = static_cast<int>(p.m / kBlockM), n_blocks = static_cast<int>(p.n / kBlockN);
  const int64_t tiles = static_cast<int64_t>(m_blocks) * n_blocks;
  const int grid = static_cast<int>(std::min<int64_t>(tiles, CurrentDevice().sms));
  GemmDgeluKernel<<<grid, kThreads, kSharedBytes, stream>>>(
      dout_map, w_map, pre_map, din_map, m_blocks, n_blocks, static_cast<int>(p.k / kBlockK));
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
