// The GELU-gradient GEMM on Hopper (sm_90a): din (M,N) = GELU'(pre) * (dout (M,K) w (K,N)).
// A persistent grid, one CTA per SM, takes 128 x 256 output tiles in turn. In warpgroup 0, thread
// 0 loads 64-wide k-blocks of dout and w (N-major, as stored) by TMA into a ring of kStages
// stages (128B swizzle); warps 1-3 load the tile's pre (64 KB in four boxes, evict-first in the
// L2) into its own buffer and turn it into GELU'(pre) (f16) in place box by box as each lands,
// while the tile multiplies. Warpgroups 1 and 2 multiply the tile's two 64 x 256 halves by wgmma
// (f32 accumulators in registers), so that their epilogue, which the tensor cores wait for, is one
// multiply per element: din is formed in place of the slopes, and the multipliers go on to the
// next tile while warp 1 stores din by TMA, waits for the store to read the buffer and loads the
// next pre into it. Where a tile's k loop is too short to hide the spare warps' work, the
// multipliers compute the slopes of the tile's last boxes themselves. Where asked, warps 1-3 then
// sum the tile's columns of din (as stored) into one row of partial sums per 128-row block, which
// saves the bias gradient's own pass over din; or, where the spare warps' chain is the longer one,
// the multipliers sum their rows of din as they form it and the spare warps only add the 8 warps'
// rows.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "model/cuda/sm90/gemm_dgelu.h"
#include "model/cuda/sm90/gemm_tiles.cuh"

namespace trainer {
namespace cuda {
namespace {

using namespace sm90;

// Column sums by the spare warps: warps 2 and 3 leave their 256 sums in the kernel's own buffer
// for warp 1 to add. By the multipliers: each of their 8 warps leaves the sums of its 16 rows
// there (one row of 256).
constexpr int kMultiplierWarps = 8;
constexpr int SharedBytes(bool sums_in_epilogue) {
  return KernelSharedBytes((sums_in_epilogue ? kMultiplierWarps : 2) * kBlockN * 4);
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// A bf16 pair (x in the low half) widened to f32: a shift and a mask.
__device__ __forceinline__ float2 WidenBf16Pair(uint32_t bits) {
  return make_float2(__uint_as_float(bits << 16), __uint_as_float(bits & 0xffff0000u));
}

// GELU'(x) for the tanh approximation, two at a time in f16: 0.5 (1 + t) + 0.5 x (1 - t^2) u'(x),
// t = tanh(u(x)), u = sqrt(2/pi) (x + 0.044715 x^3), tanh by the hardware's approximation. x is
// clamped to [-10, 10] (f16 range for x^3; GELU' there is 0 or 1 to f16 precision), after its
// rounding to f16, which leaves the same value as clamping first (an x beyond 10 rounds to 10 or
// more, inf included; a NaN becomes -10 either way) in two f16x2 instructions instead of four in
// f32. The slope's error, ~1e-3 relative, is below the bf16 rounding of din.
__device__ __forceinline__ uint32_t GeluSlopeF16x2(uint32_t bf16_pair) {
  const float2 xf = WidenBf16Pair(bf16_pair);
  const __half2 x = __hmin2(__hmax2(__floats2half2_rn(xf.x, xf.y), __float2half2_rn(-10.f)),
                            __float2half2_rn(10.f));
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

// The spare warps' column sums of the tile's din (bf16, in the output tile): thread s sums the
// 16-byte chunk s % 32 (8 columns) over the rows r = s / 32 (mod 3), in row order; warps 2 and 3
// stage theirs, and warp 1 adds them in that order and writes the tile's 256 sums to
// `partials_row` (f32). The order is fixed, so the sums do not depend on which CTA took the tile.
__device__ __forceinline__ void TileColumnSums(const uint8_t* out_tile, float* staged,
                                               float* partials_row, int spare) {
  const int chunk = spare % 32, group = spare / 32;
  const uint8_t* box = out_tile + chunk / 8 * kBoxBytes;
  float sum[8] = {};
  for (int r = group; r < kBlockM; r += 3) {
    const uint4 v = *reinterpret_cast<const uint4*>(box + r * 128 + ((chunk % 8) ^ (r % 8)) * 16);
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(pairs[i]);
      sum[2 * i] += f.x;
      sum[2 * i + 1] += f.y;
    }
  }
  if (group > 0) {
    float4* mine = reinterpret_cast<float4*>(staged + (group - 1) * kBlockN + chunk * 8);
    mine[0] = make_float4(sum[0], sum[1], sum[2], sum[3]);
    mine[1] = make_float4(sum[4], sum[5], sum[6], sum[7]);
  }
  NamedBarrierSync(2, kSpareThreads);
  if (group == 0) {
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const float4* theirs = reinterpret_cast<const float4*>(staged + g * kBlockN + chunk * 8);
      const float4 lo = theirs[0], hi = theirs[1];
      sum[0] += lo.x, sum[1] += lo.y, sum[2] += lo.z, sum[3] += lo.w;
      sum[4] += hi.x, sum[5] += hi.y, sum[6] += hi.z, sum[7] += hi.w;
    }
    float4* out = reinterpret_cast<float4*>(partials_row + chunk * 8);
    out[0] = make_float4(sum[0], sum[1], sum[2], sum[3]);
    out[1] = make_float4(sum[4], sum[5], sum[6], sum[7]);
  }
  FenceSharedForAsyncProxy();          // the reads above come before the next TMA load's writes
  NamedBarrierSync(2, kSpareThreads);  // and before the staged sums are written over
}

// One butterfly step of WarpColumnSums: lanes kBit apart swap halves of their kWidth * 2 sums, and
// each adds the half it keeps to its partner's copy of that half.
template <int kWidth, int kBit>
__device__ __forceinline__ void ButterflyStep(float* sums, int lane) {
  const bool upper = lane & kBit;
#pragma unroll
  for (int i = 0; i < kWidth; ++i) {
    const float send = upper ? sums[i] : sums[i + kWidth];
    const float keep = upper ? sums[i + kWidth] : sums[i];
    sums[i] = keep + __shfl_xor_sync(0xffffffffu, send, kBit);
  }
}
// The column sums of one multiplying warp's 16 rows of the tile, from the din pairs it has just
// formed (sums[2j + e]: its two rows' values in column 8j + 2 (lane % 4) + e, as stored in bf16),
// left in `staged_row` (256 f32). The 8 lanes that share lane % 4 hold the same columns; three
// butterfly steps (lanes 4, 8, 16 apart) each hand half of a lane's columns to its partner and add
// the partner's half of its own, so that lane l ends with 8 columns' sums: index 8q + t (t < 8) of
// the original 64, q = 4 bit2(l) + 2 bit3(l) + bit4(l), which is column 32q + 8(t/2) + 2(l % 4) +
// t % 2. Each column is added up in one lane in a fixed order.
__device__ __forceinline__ void WarpColumnSums(float* sums, float* staged_row) {
  const int lane = threadIdx.x % 32;
  ButterflyStep<32, 4>(sums, lane);
  ButterflyStep<16, 8>(sums, lane);
  ButterflyStep<8, 16>(sums, lane);
  const int q = 4 * (lane >> 2 & 1) + 2 * (lane >> 3 & 1) + (lane >> 4 & 1);
#pragma unroll
  for (int t = 0; t < 8; t += 2)
    *reinterpret_cast<float2*>(staged_row + 32 * q + 8 * (t / 2) + 2 * (lane % 4)) =
        make_float2(sums[t], sums[t + 1]);
}

// The spare warps' part of the multipliers' sums: the 8 warps' rows added in order into the tile's
// row of partial sums.
__device__ __forceinline__ void AddStagedColumnSums(const float* staged, float* partials_row,
                                                    int spare) {
  for (int col = spare; col < kBlockN; col += kSpareThreads) {
    float sum = staged[col];
#pragma unroll
    for (int w = 1; w < kMultiplierWarps; ++w) sum += staged[w * kBlockN + col];
    partials_row[col] = sum;
  }
}

template <int kCluster, bool kSumsInEpilogue>
__global__ void __launch_bounds__(kThreads, 1)
    GemmDgeluKernel(const __grid_constant__ CUtensorMap dout_map,
                    const __grid_constant__ CUtensorMap w_map,
                    const __grid_constant__ CUtensorMap pre_map,
                    const __grid_constant__ CUtensorMap din_map, float* column_partials,
                    TileOrder order, int k_blocks, int epilogue_slope_boxes) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t shared_raw[];
  const TileShared s = CarveTileShared(shared_raw);
  uint64_t* pre_full = s.own_barriers;            // (kTileBoxes) the TMA has brought a box of pre
  uint64_t* slope_ready = pre_full + kTileBoxes;  // the spare warps have turned pre into slopes
  uint64_t* din_written = slope_ready + 1;        // the multiplying warps have written din

  const int warpgroup = threadIdx.x / 128;
  // This CTA's groups of tiles (one per cluster) and its tile in each.
  const int groups = order.groups(), first_group = blockIdx.x / kCluster;
  const int group_stride = gridDim.x / kCluster;
  const int rank = kCluster > 1 ? static_cast<int>(ClusterCtaRank()) : 0;
  const int spare_slope_boxes = kTileBoxes - epilogue_slope_boxes;  // the first ones
  if (threadIdx.x == 0) {
    InitRing(s, &dout_map, &w_map, &pre_map, &din_map, kCluster);
    for (int box = 0; box < kTileBoxes; ++box) BarrierInit(&pre_full[box], 1);
    BarrierInit(slope_ready, kSpareThreads);
    BarrierInit(din_written, kMultiplierWarps);
    BarrierInitFence();
  }
  if (kCluster > 1)
    ClusterSync();
  else
    __syncthreads();

  if (warpgroup == 0) RegistersDecrease<kLoaderRegisters>();  // by the whole warpgroup
  if (warpgroup == 0 && threadIdx.x >= 32) {  // warps 1-3: pre, GELU'(pre), din's store, the sums
    const bool store_thread = threadIdx.x == 32;
    uint32_t phase = 0;
    const uint64_t evict_first = L2EvictFirstPolicy();
    for (int group = first_group; group < groups; group += group_stride) {
      int m0, n0;
      order.Coordinates(group, rank, &m0, &n0);
      if (store_thread) {  // the buffer is free: the first tile, or the last store has read it
        for (int box = 0; box < kTileBoxes; ++box) {
          BarrierArriveExpectBytes(&pre_full[box], kBoxBytes);
          TmaLoad2dHinted(s.out_tile + box * kBoxBytes, &pre_map, &pre_full[box],
                          n0 + box * kBoxCols, m0, evict_first);
        }
      }
      // Each box's slopes as soon as it lands; the epilogue's boxes too have landed before
      // slope_ready, since the multipliers read their pre.
      for (int box = 0; box < kTileBoxes; ++box) {
        BarrierWait(&pre_full[box], phase);
        if (box >= spare_slope_boxes) continue;
        uint4* chunks = reinterpret_cast<uint4*>(s.out_tile + box * kBoxBytes);
        for (int c = threadIdx.x - 32; c < kBoxBytes / 16; c += kSpareThreads) {
          uint4 v = chunks[c];  // 8 elements; the swizzle is moot
          v.x = GeluSlopeF16x2(v.x), v.y = GeluSlopeF16x2(v.y);
          v.z = GeluSlopeF16x2(v.z), v.w = GeluSlopeF16x2(v.w);
          chunks[c] = v;
        }
      }
      BarrierArrive(slope_ready);
      BarrierWait(din_written, phase);
      phase ^= 1;
      if (store_thread) StoreTile(&din_map, s.out_tile, m0, n0);
      if (column_partials != nullptr) {
        float* partials_row =
            column_partials + static_cast<int64_t>(m0 / kBlockM) * order.n_blocks * kBlockN + n0;
        // The multipliers' staged rows are not written again before this tile's slope_ready has
        // come from every spare thread, which follows these reads; TileColumnSums' reads of din
        // end, for all three warps, before the store thread goes on to the next pre.
        if (kSumsInEpilogue)
          AddStagedColumnSums(reinterpret_cast<const float*>(s.rest), partials_row,
                              threadIdx.x - 32);
        else
          TileColumnSums(s.out_tile, reinterpret_cast<float*>(s.rest), partials_row,
                         threadIdx.x - 32);
      }
      if (store_thread) TmaStoreWaitRead();  // the buffer is free for the next pre
    }
    if (store_thread) TmaStoreWaitAll();
  } else if (warpgroup == 0) {  // the loader
    if (threadIdx.x == 0) {
      RingPosition ring;
      for (int group = first_group; group < groups; group += group_stride) {
        int m0, n0;
        order.Coordinates(group, rank, &m0, &n0);
        LoadTile<BMajor::kN, kCluster>(s, &dout_map, &w_map, m0, n0, k_blocks, &ring, rank);
      }
    }
  } else {  // the multipliers: warpgroup 1 takes the tile's rows 0-63, warpgroup 2 rows 64-127
    RegistersIncrease<kMultiplierRegisters>();
    const int half = warpgroup - 1;
    float acc[128];
    RingPosition ring;
    uint32_t phase = 0;
    for (int group = first_group; group < groups; group += group_stride) {
      MultiplyTile<BMajor::kN, kCluster>(acc, s, half, k_blocks, &ring);
      // din = acc * GELU'(pre), in place of the slopes (or of pre, in the boxes left to us).
      BarrierWait(slope_ready, phase);
      phase ^= 1;
      float sums[64];  // with kSumsInEpilogue: this thread's two rows of din, column by column
      // Box by box: the box's 16 pairs of this thread read together (their shared-memory latency
      // paid once, not once per pair behind a branch), their slopes formed from pre where the box
      // is left to the epilogue (the same for the whole CTA), then din.
#pragma unroll
      for (int box = 0; box < kTileBoxes; ++box) {
        constexpr int kPairs = 2 * kBoxCols / 8;  // j = 8 box .. 8 box + 7, h = 0, 1
        uint32_t slope_bits[kPairs];
#pragma unroll
        for (int i = 0; i < kPairs; ++i)
          slope_bits[i] = *reinterpret_cast<const uint32_t*>(
              PairInTile(s.out_tile, half, 8 * box + i / 2, i % 2));
        if (box >= spare_slope_boxes) {
#pragma unroll
          for (int i = 0; i < kPairs; ++i) slope_bits[i] = GeluSlopeF16x2(slope_bits[i]);
        }
#pragma unroll
        for (int i = 0; i < kPairs; ++i) {
          const int j = 8 * box + i / 2, h = i % 2;
          const float2 slope = __half22float2(*reinterpret_cast<const __half2*>(&slope_bits[i]));
          const __nv_bfloat162 din_pair =
              __floats2bfloat162_rn(acc[4 * j + 2 * h] * slope.x, acc[4 * j + 2 * h + 1] * slope.y);
          *reinterpret_cast<__nv_bfloat162*>(PairInTile(s.out_tile, half, j, h)) = din_pair;
          if (kSumsInEpilogue) {  // the pair as stored
            const float2 v = WidenBf16Pair(*reinterpret_cast<const uint32_t*>(&din_pair));
            sums[2 * j] = h == 0 ? v.x : sums[2 * j] + v.x;
            sums[2 * j + 1] = h == 0 ? v.y : sums[2 * j + 1] + v.y;
          }
        }
      }
      if (kSumsInEpilogue)  // launched only with column_partials (KernelFor)
        WarpColumnSums(sums, reinterpret_cast<float*>(s.rest) + (threadIdx.x - 128) / 32 * kBlockN);
      // Each warp's writes, made visible to the TMA's store, then its arrival (no wait: the next
      // tile's k loop starts at once; its slopes come only after the store has read this din).
      FenceSharedForAsyncProxy();
      __syncwarp();
      if (threadIdx.x % 32 == 0) BarrierArrive(din_written);
    }
  }
  // In a cluster no CTA leaves while the other may still arrive on its barriers.
  if (kCluster > 1) ClusterSync();
#endif
}

// The instantiation for a problem (the sums in the epilogue only where there are sums) and its
// shared memory.
struct KernelChoice {
  decltype(&GemmDgeluKernel<1, false>) kernel;
  int shared_bytes;
};
KernelChoice KernelFor(const GemmDgeluProblem& p) {
  const bool sums = p.sums_in_epilogue && p.column_partials != nullptr;
  const int bytes = SharedBytes(sums);
  if (p.cluster == 2) return {sums ? GemmDgeluKernel<2, true> : GemmDgeluKernel<2, false>, bytes};
  return {sums ? GemmDgeluKernel<1, true> : GemmDgeluKernel<1, false>, bytes};
}

}  // namespace

bool GemmDgeluSupported(const GemmDgeluProblem& p) {
  return TilesFit(p.m, p.n, p.k, p.cluster) && Aligned16(p.dout) && Aligned16(p.w) &&
         Aligned16(p.pre) && Aligned16(p.din) && Aligned16(p.column_partials) &&
         p.epilogue_slope_boxes >= 0 && p.epilogue_slope_boxes <= kTileBoxes;
}

int GemmDgeluGridSize(const GemmDgeluProblem& p) {
  if (!GemmDgeluSupported(p)) return 0;
  cudaLaunchConfig_t config;
  cudaLaunchAttribute attribute;
  const KernelChoice k = KernelFor(p);
  return TiledLaunchConfig(k.kernel, k.shared_bytes, p.m, p.n, p.cluster, nullptr, &config,
                           &attribute) == cudaSuccess
             ? static_cast<int>(config.gridDim.x)
             : 0;
}

cudaError_t LaunchGemmDgelu(const GemmDgeluProblem& p, cudaStream_t stream) {
  if (!GemmDgeluSupported(p)) return cudaErrorNotSupported;
  CUtensorMap dout_map, w_map, pre_map, din_map;
  if (!MakeGemmMaps(&dout_map, &w_map, &pre_map, &din_map, p.dout, p.w, p.pre, p.din, p.m, p.n, p.k,
                    BMajor::kN, p.cluster))
    return cudaErrorInvalidValue;
  const TileOrder order{static_cast<int>(p.m / kBlockM), static_cast<int>(p.n / kBlockN),
                        p.cluster};
  const KernelChoice k = KernelFor(p);
  const cudaError_t e = LaunchTiled(k.kernel, k.shared_bytes, p.m, p.n, p.cluster, stream, dout_map,
                                    w_map, pre_map, din_map, static_cast<float*>(p.column_partials),
                                    order, static_cast<int>(p.k / kBlockK), p.epilogue_slope_boxes);
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
