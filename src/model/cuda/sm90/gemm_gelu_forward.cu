// The MLP's first GEMM with bias and GELU on Hopper (sm_90a): pre = x w^T + bias, out = GELU(pre).
// The mainloop is gemm_tiles.cuh's (128 x 256 tiles, a TMA thread, two multiplying warpgroups);
// the tile's bias slice (512 bytes) comes with its first k-block. The multipliers' epilogue, which
// the tensor cores wait for, only adds the bias and writes pre into the output tile. The loading
// warpgroup's spare warps (1-3) do the rest while the next tile multiplies: store pre by TMA, turn
// the tile into GELU(pre) in place once that store has read it, store out, and hand the buffer
// back to the multipliers.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "model/cuda/sm90/gemm_gelu_forward.h"
#include "model/cuda/sm90/gemm_tiles.cuh"

namespace trainer {
namespace cuda {
namespace {

using namespace sm90;

constexpr int kBiasSlotBytes = kBlockN * 2;  // a tile's bias slice, bf16
constexpr int kBiasSlots = 2;  // the loader is less than a tile ahead when K >= kStages k-blocks
constexpr int kSharedBytes = KernelSharedBytes(kBiasSlots * kBiasSlotBytes);

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// GELU(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), tanh by the hardware's
// approximation (2^-11 relative, below the bf16 rounding of out).
__device__ __forceinline__ float Gelu(float x) {
  const float u = x * fmaf(kGeluScale * kGeluCubic, x * x, kGeluScale);
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(u));
  const float half_x = 0.5f * x;
  return fmaf(half_x, t, half_x);
}

__device__ __forceinline__ uint32_t GeluBf16x2(uint32_t pair) {
  const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pair));
  const __nv_bfloat162 y = __floats2bfloat162_rn(Gelu(x.x), Gelu(x.y));
  return *reinterpret_cast<const uint32_t*>(&y);
}

template <int kCluster>
__global__ void __launch_bounds__(kThreads, 1)
    GemmGeluForwardKernel(const __grid_constant__ CUtensorMap x_map,
                          const __grid_constant__ CUtensorMap w_map,
                          const __grid_constant__ CUtensorMap pre_map,
                          const __grid_constant__ CUtensorMap out_map, const uint8_t* bias,
                          TileOrder order, int k_blocks) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t shared_raw[];
  const TileShared s = CarveTileShared(shared_raw);
  uint64_t* pre_written = s.own_barriers;  // the multipliers have written pre into the tile
  uint64_t* tile_free = pre_written + 1;   // the spare warps' stores have read the tile
  uint8_t* bias_slots = s.rest;

  const int warpgroup = threadIdx.x / 128;
  // This CTA's groups of tiles (one per cluster) and its tile in each.
  const int groups = order.groups(), first_group = blockIdx.x / kCluster;
  const int group_stride = gridDim.x / kCluster;
  const int rank = kCluster > 1 ? static_cast<int>(ClusterCtaRank()) : 0;
  if (threadIdx.x == 0) {
    InitRing(s, &x_map, &w_map, &pre_map, &out_map, kCluster);
    BarrierInit(pre_written, 256);
    BarrierInit(tile_free, 1);
    BarrierInitFence();
  }
  if (kCluster > 1)
    ClusterSync();
  else
    __syncthreads();

  if (warpgroup == 0) RegistersDecrease<kLoaderRegisters>();  // by the whole warpgroup
  if (warpgroup == 0 && threadIdx.x >= 32) {  // warps 1-3: store pre, GELU in place, store out
    const bool leader = threadIdx.x == 32;
    uint32_t phase = 0;
    for (int group = first_group; group < groups; group += group_stride) {
      int m0, n0;
      order.Coordinates(group, rank, &m0, &n0);
      BarrierWait(pre_written, phase);
      phase ^= 1;
      if (leader) {
        StoreTile(&pre_map, s.out_tile, m0, n0);
        TmaStoreWaitRead();
      }
      NamedBarrierSync(2, kSpareThreads);  // pre has left the tile: it may be written over
      for (int c = threadIdx.x - 32; c < kOutTileBytes / 16; c += kSpareThreads) {
        uint4* p = reinterpret_cast<uint4*>(s.out_tile) + c;  // 8 elements; the swizzle is moot
        uint4 v = *p;
        v.x = GeluBf16x2(v.x), v.y = GeluBf16x2(v.y);
        v.z = GeluBf16x2(v.z), v.w = GeluBf16x2(v.w);
        *p = v;
      }
      FenceSharedForAsyncProxy();
      NamedBarrierSync(2, kSpareThreads);
      if (leader) {
        StoreTile(&out_map, s.out_tile, m0, n0);
        TmaStoreWaitRead();
        BarrierArrive(tile_free);
      }
    }
    if (leader) TmaStoreWaitAll();
  } else if (warpgroup == 0) {  // the loader; the tile's bias slice comes with its first k-block
    if (threadIdx.x == 0) {
      RingPosition ring;
      int slot = 0;
      for (int group = first_group; group < groups; group += group_stride, slot ^= 1) {
        int m0, n0;
        order.Coordinates(group, rank, &m0, &n0);
        LoadTile<BMajor::kK, kCluster>(s, &x_map, &w_map, m0, n0, k_blocks, &ring, rank,
                                       bias + n0 * 2, bias_slots + slot * kBiasSlotBytes,
                                       kBiasSlotBytes);
      }
    }
  } else {  // the multipliers: warpgroup 1 takes the tile's rows 0-63, warpgroup 2 rows 64-127
    RegistersIncrease<kMultiplierRegisters>();
    const int half = warpgroup - 1;
    const int lane = threadIdx.x % 32;
    float acc[128];
    RingPosition ring;
    uint32_t phase = 0;
    int slot = 0;
    for (int group = first_group; group < groups; group += group_stride, slot ^= 1) {
      MultiplyTile<BMajor::kK, kCluster>(acc, s, half, k_blocks, &ring);
      // pre = acc + bias into the tile, once the last tile's out has left it. The bias slice came
      // with the first k-block, whose barrier this thread has waited on.
      BarrierWait(tile_free, phase ^ 1);
      phase ^= 1;
      const uint8_t* tile_bias = bias_slots + slot * kBiasSlotBytes;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const float2 b = __bfloat1622float2(
            *reinterpret_cast<const __nv_bfloat162*>(tile_bias + (8 * j + 2 * (lane % 4)) * 2));
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<__nv_bfloat162*>(PairInTile(s.out_tile, half, j, h)) =
              __floats2bfloat162_rn(acc[4 * j + 2 * h] + b.x, acc[4 * j + 2 * h + 1] + b.y);
      }
      FenceSharedForAsyncProxy();
      BarrierArrive(pre_written);
    }
  }
  // In a cluster no CTA leaves while the other may still arrive on its barriers.
  if (kCluster > 1) ClusterSync();
#endif
}

}  // namespace

bool GemmGeluForwardSupported(const GemmGeluForwardProblem& p) {
  return TilesFit(p.m, p.n, p.k, p.cluster) && p.k >= kStages * kBlockK && p.bias != nullptr &&
         Aligned16(p.x) && Aligned16(p.w) && Aligned16(p.bias) && Aligned16(p.pre) &&
         Aligned16(p.out);
}

cudaError_t LaunchGemmGeluForward(const GemmGeluForwardProblem& p, cudaStream_t stream) {
  if (!GemmGeluForwardSupported(p)) return cudaErrorNotSupported;
  CUtensorMap x_map, w_map, pre_map, out_map;
  if (!MakeGemmMaps(&x_map, &w_map, &pre_map, &out_map, p.x, p.w, p.pre, p.out, p.m, p.n, p.k,
                    BMajor::kK, p.cluster))
    return cudaErrorInvalidValue;
  const TileOrder order{static_cast<int>(p.m / kBlockM), static_cast<int>(p.n / kBlockN),
                        p.cluster};
  auto* kernel = p.cluster == 2 ? GemmGeluForwardKernel<2> : GemmGeluForwardKernel<1>;
  const cudaError_t e =
      LaunchTiled(kernel, kSharedBytes, p.m, p.n, p.cluster, stream, x_map, w_map, pre_map, out_map,
                  static_cast<const uint8_t*>(p.bias), order, static_cast<int>(p.k / kBlockK));
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
