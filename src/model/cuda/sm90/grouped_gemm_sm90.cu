// The MoE experts' grouped GEMMs on Hopper (sm_90a; grouped_gemm_sm90.h): every group's 128 x 256
// output tiles in one persistent launch. The mainloop is gemm_tiles.cuh's (a TMA thread feeding
// the stage ring, two multiplying warpgroups): a tile of block i (GroupedBlock) reads rows
// blocks[i].row .. + 127 of the row-side operand and the block's expert's rows of the stacked
// weights, (E * OC, C) as one matrix: K-major B rows e OC + n0 .. for the forward, N-major B
// k-blocks from row e OC for the input gradient. The rows past the group in a group's last block
// are multiplied like the others (the next group's rows, or the TMA's zeros past the tensor) and
// never stored. The multipliers write the tile (bf16) into the output tile in shared memory and go
// on to the next tile; the loading warpgroup's spare warps store the block's rows of it to global
// memory, 16 bytes a thread and a row a warp at a time, and hand the buffer back.
//
// The weight gradient is a kernel of its own on the same ring: A = dout^T (OC rows of the tile by
// the k-block's 64 rows of dout, M-major: two (64 rows, 64 columns) boxes of dout, one per
// multiplying warpgroup), B = in (N-major: four such boxes). A tile (expert, 128 of OC, 256 of C)
// walks the expert's runs (its groups) in 64-row k-blocks from each run's first row; where a
// k-block reaches past its run, the multipliers zero those rows of the stage (A's and B's: the rows
// past the run may be another group's or hold anything) before multiplying it. They then write
// (or add) the f32 tile straight from their accumulators: each tile is one expert's own block of
// dW, written by one CTA, in a fixed order of the rows.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "model/cuda/sm90/gemm_tiles.cuh"
#include "model/cuda/sm90/grouped_gemm_sm90.h"

namespace trainer {
namespace cuda {
namespace {

using namespace sm90;

constexpr int kSharedBytes = KernelSharedBytes(0);

// The first `rows` rows of the output tile (bf16, four swizzled boxes of (128, 64)) to rows
// row0 .. row0 + rows - 1, columns n0 .. n0 + 255 of `out` (row-major, `cols` columns), by
// `threads` threads (thread: this one's index among them). Chunk c is row c / 32, 16-byte chunk
// c % 32 of it: box c % 32 / 8, at (c % 8) ^ (row % 8) of the box row's 16-byte slots (the 128B
// swizzle).
__device__ __forceinline__ void StoreTileRows(const uint8_t* out_tile, uint8_t* out, int64_t cols,
                                              int64_t row0, int n0, int rows, int thread,
                                              int threads) {
  for (int c = thread; c < rows * 32; c += threads) {
    const int r = c / 32, chunk = c % 32;
    const uint4 v = *reinterpret_cast<const uint4*>(out_tile + chunk / 8 * kBoxBytes + r * 128 +
                                                    ((chunk % 8) ^ (r % 8)) * 16);
    *reinterpret_cast<uint4*>(out + ((row0 + r) * cols + n0 + chunk * 8) * 2) = v;
  }
}

// The tile of `t` in the tile order: its block and first column.
__device__ __forceinline__ GroupedBlock TileBlock(const TileOrder& order,
                                                  const GroupedBlock* blocks, int t, int* n0) {
  int m0;
  order.Coordinates(t, 0, &m0, n0);
  const int4 b = __ldg(reinterpret_cast<const int4*>(blocks) + m0 / kBlockM);
  GroupedBlock block;
  block.row = b.x, block.end = b.y, block.expert = b.z;
  return block;
}

// kB: the weights' layout as B (K-major for the forward, N-major for the input gradient);
// expert_rows: OC, the rows of one expert's matrix; out_cols: N.
template <BMajor kB>
__global__ void __launch_bounds__(kThreads, 1)
    GroupedGemmKernel(const __grid_constant__ CUtensorMap a_map,
                      const __grid_constant__ CUtensorMap b_map, const GroupedBlock* blocks,
                      uint8_t* out, TileOrder order, int k_blocks, int expert_rows,
                      int64_t out_cols) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t shared_raw[];
  const TileShared s = CarveTileShared(shared_raw);
  uint64_t* tile_written = s.own_barriers;  // the multipliers have written the output tile
  uint64_t* tile_free = tile_written + 1;   // the spare warps have stored it

  const int warpgroup = threadIdx.x / 128;
  const int tiles = order.groups();
  if (threadIdx.x == 0) {
    InitRing(s, &a_map, &b_map, nullptr, nullptr, 1);
    BarrierInit(tile_written, 256);
    BarrierInit(tile_free, 1);
    BarrierInitFence();
  }
  __syncthreads();

  if (warpgroup == 0) RegistersDecrease<kLoaderRegisters>();  // by the whole warpgroup
  if (warpgroup == 0 && threadIdx.x >= 32) {  // warps 1-3: the block's rows of the tile to out
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      int n0;
      const GroupedBlock block = TileBlock(order, blocks, t, &n0);
      const int rows = min(kBlockM, block.end - block.row);
      BarrierWait(tile_written, phase);
      phase ^= 1;
      StoreTileRows(s.out_tile, out, out_cols, block.row, n0, rows, threadIdx.x - 32,
                    kSpareThreads);
      NamedBarrierSync(2, kSpareThreads);  // every spare thread has read its part of the tile
      if (threadIdx.x == 32) BarrierArrive(tile_free);
    }
  } else if (warpgroup == 0) {  // the loader
    if (threadIdx.x == 0) {
      RingPosition ring;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int n0;
        const GroupedBlock block = TileBlock(order, blocks, t, &n0);
        const int expert_row = block.expert * expert_rows;
        if (kB == BMajor::kK)  // B rows: the expert's output features n0 ..
          LoadTile<BMajor::kK>(s, &a_map, &b_map, block.row, expert_row + n0, k_blocks, &ring);
        else  // B k-blocks: the expert's rows (its output features) from expert_row on
          LoadTile<BMajor::kN>(s, &a_map, &b_map, block.row, n0, k_blocks, &ring, 0, nullptr,
                               nullptr, 0, expert_row);
      }
    }
  } else {  // the multipliers: warpgroup 1 takes the tile's rows 0-63, warpgroup 2 rows 64-127
    RegistersIncrease<kMultiplierRegisters>();
    RingPosition ring;
    float acc[128];
    for (int t = blockIdx.x, i = 0; t < tiles; t += gridDim.x, ++i) {
      MultiplyTile<kB>(acc, s, warpgroup - 1, k_blocks, &ring);
      BarrierWait(tile_free, (i & 1) ^ 1);  // the last tile has been stored (none: at once)
      const int half = warpgroup - 1;
#pragma unroll
      for (int j = 0; j < 32; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<__nv_bfloat162*>(PairInTile(s.out_tile, half, j, h)) =
              __floats2bfloat162_rn(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      BarrierArrive(tile_written);
    }
  }
#endif
}

// ---- the weight gradient ----

// The tile of `t`: its expert (from the list; expert_m_blocks tiles of 128 rows of OC each), its
// first row of OC and first column of C.
__device__ __forceinline__ GroupedExpert ExpertTile(const TileOrder& order,
                                                    const GroupedExpert* experts,
                                                    int expert_m_blocks, int t, int* m0, int* n0) {
  int row;
  order.Coordinates(t, 0, &row, n0);
  const int block = row / kBlockM;
  *m0 = block % expert_m_blocks * kBlockM;
  const int4 e = __ldg(reinterpret_cast<const int4*>(experts) + block / expert_m_blocks);
  GroupedExpert expert;
  expert.expert = e.x, expert.first_run = e.y, expert.runs = e.z;
  return expert;
}

// Run i's rows [x, y).
__device__ __forceinline__ int2 RunRows(const GroupedBlock* runs, int i) {
  const int4 r = __ldg(reinterpret_cast<const int4*>(runs) + i);
  return make_int2(r.x, r.y);
}

// The k-blocks of an expert's tile: 64-row blocks from each run's first row.
__device__ __forceinline__ int ExpertKBlocks(const GroupedBlock* runs, const GroupedExpert& e) {
  int k_blocks = 0;
  for (int i = e.first_run; i < e.first_run + e.runs; ++i) {
    const int2 rows = RunRows(runs, i);
    k_blocks += (rows.y - rows.x + kBlockK - 1) / kBlockK;
  }
  return k_blocks;
}

// The loader's k-block of rows row .. row + 63: dout's columns m0 .. m0 + 127 (two boxes) and in's
// columns n0 .. n0 + 255 (four boxes), all (64 rows, 64 columns), rows past the tensor zeros.
__device__ __forceinline__ void LoadRowsKBlock(const TileShared& s, const CUtensorMap* dout_map,
                                               const CUtensorMap* in_map, int m0, int n0, int row,
                                               RingPosition* ring) {
  uint64_t* bar = &s.full[ring->stage];
  BarrierWait(&s.empty[ring->stage], ring->phase ^ 1);
  BarrierArriveExpectBytes(bar, kATileBytes + kBTileBytes);
  uint8_t* a_tile = s.a_tiles + ring->stage * kATileBytes;
  for (int box = 0; box < kBlockM / kBoxCols; ++box)
    TmaLoad2d(a_tile + box * kNMajorBoxBytes, dout_map, bar, m0 + box * kBoxCols, row);
  uint8_t* b_tile = s.b_tiles + ring->stage * kBTileBytes;
  for (int box = 0; box < kTileBoxes; ++box)
    TmaLoad2d(b_tile + box * kNMajorBoxBytes, in_map, bar, n0 + box * kBoxCols, row);
  ring->Advance();
}

// Both multiplying warpgroups: rows valid .. 63 of the stage's boxes to zero, warpgroup `half`
// taking its A box and B boxes 2 half, 2 half + 1 (every box row is 128 bytes, whatever the
// swizzle), then made visible to the wgmma of both.
__device__ __forceinline__ void ZeroRowsFrom(const TileShared& s, int stage, int half, int valid) {
  uint8_t* a_box = s.a_tiles + stage * kATileBytes + half * kNMajorBoxBytes;
  uint8_t* b_boxes = s.b_tiles + stage * kBTileBytes + 2 * half * kNMajorBoxBytes;
  const int chunks = (kBlockK - valid) * 8;  // 16-byte chunks of a box's rows valid .. 63
  for (int c = threadIdx.x % 128; c < 3 * chunks; c += 128) {
    const int box = c / chunks;
    uint8_t* base = box == 0 ? a_box : b_boxes + (box - 1) * kNMajorBoxBytes;
    reinterpret_cast<uint4*>(base + valid * 128)[c % chunks] = make_uint4(0, 0, 0, 0);
  }
  FenceSharedForAsyncProxy();
  NamedBarrierSync(3, 256);
}

// This thread's accumulators (rows 16 warp + lane / 4 + 8 h of the half, columns 8 j + 2 (lane % 4)
// + {0, 1}) into the half's 64 rows at `tile` (f32, row stride ld), added to what is there with
// `accumulate`. The old values are read sixteen at a time before any of them is written: read one
// by one, each load would wait for the store before it (the compiler cannot tell that rows ld
// apart do not overlap), 64 memory latencies in a row per tile while the tensor cores idle.
__device__ __forceinline__ void StoreAccumulators(const float* acc, float* tile, int64_t ld,
                                                  bool accumulate) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  float* base = tile + static_cast<int64_t>(warp * 16 + lane / 4) * ld + 2 * (lane % 4);
  const auto at = [&](int j, int h) {
    return reinterpret_cast<float2*>(base + 8 * h * ld + 8 * j);
  };
  constexpr int kBatch = 8;  // columns j per batch: 8 x 2 float2 loads in flight
#pragma unroll
  for (int j0 = 0; j0 < 32; j0 += kBatch) {
    float2 old[kBatch][2];
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        if (accumulate) old[j][h] = *at(j0 + j, h);
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 4 * (j0 + j) + 2 * h;
        float2 v = make_float2(acc[i], acc[i + 1]);
        if (accumulate) v.x += old[j][h].x, v.y += old[j][h].y;
        *at(j0 + j, h) = v;
      }
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    GroupedWeightGradientKernel(const __grid_constant__ CUtensorMap dout_map,
                                const __grid_constant__ CUtensorMap in_map,
                                const GroupedExpert* experts, const GroupedBlock* runs,
                                float* dweights, TileOrder order, int expert_m_blocks, int64_t oc,
                                int64_t c, bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t shared_raw[];
  const TileShared s = CarveTileShared(shared_raw);
  const int warpgroup = threadIdx.x / 128;
  const int tiles = order.groups();
  if (threadIdx.x == 0) {
    InitRing(s, &dout_map, &in_map, nullptr, nullptr, 1);
    BarrierInitFence();
  }
  __syncthreads();

  if (warpgroup == 0) {  // the loader (thread 0; the spare warps have nothing to do)
    RegistersDecrease<kLoaderRegisters>();
    if (threadIdx.x == 0) {
      RingPosition ring;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int m0, n0;
        const GroupedExpert e = ExpertTile(order, experts, expert_m_blocks, t, &m0, &n0);
        for (int i = e.first_run; i < e.first_run + e.runs; ++i) {
          const int2 rows = RunRows(runs, i);
          for (int row = rows.x; row < rows.y; row += kBlockK)
            LoadRowsKBlock(s, &dout_map, &in_map, m0, n0, row, &ring);
        }
      }
    }
  } else {  // the multipliers: warpgroup 1 takes the tile's rows 0-63 of OC, warpgroup 2 64-127
    RegistersIncrease<kMultiplierRegisters>();
    const int half = warpgroup - 1;
    RingPosition ring;
    float acc[128];
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      int m0, n0;
      const GroupedExpert e = ExpertTile(order, experts, expert_m_blocks, t, &m0, &n0);
      // The k-blocks in the loader's order: run `run`, its rows [rows.x, rows.y), from `row`.
      int run = e.first_run;
      int2 rows = RunRows(runs, run);
      int row = rows.x;
      auto zero_past_run = [&](int stage) {
        const int valid = min(kBlockK, rows.y - row);
        if (valid < kBlockK) ZeroRowsFrom(s, stage, half, valid);
        row += kBlockK;
        if (row >= rows.y && ++run < e.first_run + e.runs) {
          rows = RunRows(runs, run);
          row = rows.x;
        }
      };
      MultiplyTile<BMajor::kN, 1, true>(acc, s, half, ExpertKBlocks(runs, e), &ring, zero_past_run);
      StoreAccumulators(acc, dweights + (e.expert * oc + m0 + half * 64) * c + n0, c, accumulate);
    }
  }
#endif
}

// The problem's GEMM: A (m, k) the row-side input, B the weights, the output n columns wide.
struct GroupedShape {
  int64_t k, n;
  BMajor b_major;
};
GroupedShape ShapeOf(const GroupedSm90Problem& p) {
  if (p.op == GroupedSm90Op::kForward) return {p.c, p.oc, BMajor::kK};
  return {p.oc, p.c, BMajor::kN};
}

}  // namespace

bool GroupedSm90Supported(const GroupedSm90Problem& p) {
  constexpr int64_t kIntLimit = int64_t{1} << 31;
  return CurrentDevice().sm90 && EncodeTiled() != nullptr && p.m > 0 && p.m < kIntLimit &&
         p.experts > 0 && p.oc > 0 && p.c > 0 && p.oc % kBlockN == 0 && p.c % kBlockN == 0 &&
         p.experts * p.oc < kIntLimit && p.c < kIntLimit && p.block_count >= 0 &&
         p.block_count * kBlockM < kIntLimit && (p.block_count == 0 || p.blocks != nullptr) &&
         Aligned16(p.rows_in) && Aligned16(p.weights) && Aligned16(p.rows_out) &&
         Aligned16(p.blocks);
}

cudaError_t LaunchGroupedSm90(const GroupedSm90Problem& p, cudaStream_t stream) {
  if (!GroupedSm90Supported(p)) return cudaErrorNotSupported;
  if (p.block_count == 0) return cudaSuccess;
  const GroupedShape shape = ShapeOf(p);
  CUtensorMap a_map, b_map;
  const bool b_made = shape.b_major == BMajor::kK
                          ? MakeTileMap(&b_map, p.weights, p.experts * p.oc, p.c, kBlockN)
                          : MakeTileMap(&b_map, p.weights, p.experts * p.oc, p.c, kBlockK);
  if (!MakeTileMap(&a_map, p.rows_in, p.m, shape.k, kBlockM) || !b_made)
    return cudaErrorInvalidValue;
  const TileOrder order{static_cast<int>(p.block_count), static_cast<int>(shape.n / kBlockN), 1};
  auto* kernel =
      shape.b_major == BMajor::kK ? GroupedGemmKernel<BMajor::kK> : GroupedGemmKernel<BMajor::kN>;
  const cudaError_t e =
      LaunchTiled(kernel, kSharedBytes, p.block_count * kBlockM, shape.n, 1, stream, a_map, b_map,
                  p.blocks, static_cast<uint8_t*>(p.rows_out), order,
                  static_cast<int>(shape.k / kBlockK), static_cast<int>(p.oc), shape.n);
  return e != cudaSuccess ? e : cudaGetLastError();
}

bool GroupedSm90WeightGradientSupported(const GroupedSm90WeightGradient& p) {
  constexpr int64_t kIntLimit = int64_t{1} << 31;
  return CurrentDevice().sm90 && EncodeTiled() != nullptr && p.m > 0 && p.m < kIntLimit &&
         p.experts > 0 && p.oc > 0 && p.c > 0 && p.oc % kBlockN == 0 && p.c % kBlockN == 0 &&
         p.oc < kIntLimit && p.c < kIntLimit && p.expert_count >= 0 &&
         p.expert_count <= p.experts && (p.expert_count == 0 || p.expert_list != nullptr) &&
         (p.expert_count == 0 || p.runs != nullptr) && Aligned16(p.dout) && Aligned16(p.in) &&
         Aligned16(p.dweights) && Aligned16(p.expert_list) && Aligned16(p.runs);
}

cudaError_t LaunchGroupedSm90WeightGradient(const GroupedSm90WeightGradient& p,
                                            cudaStream_t stream) {
  if (!GroupedSm90WeightGradientSupported(p)) return cudaErrorNotSupported;
  if (p.expert_count == 0) return cudaSuccess;
  CUtensorMap dout_map, in_map;
  if (!MakeTileMap(&dout_map, p.dout, p.m, p.oc, kBlockK) ||
      !MakeTileMap(&in_map, p.in, p.m, p.c, kBlockK))
    return cudaErrorInvalidValue;
  const int expert_m_blocks = static_cast<int>(p.oc / kBlockM);
  const int64_t m_blocks = p.expert_count * expert_m_blocks;
  const TileOrder order{static_cast<int>(m_blocks), static_cast<int>(p.c / kBlockN), 1};
  const cudaError_t e =
      LaunchTiled(GroupedWeightGradientKernel, kSharedBytes, m_blocks * kBlockM, p.c, 1, stream,
                  dout_map, in_map, p.expert_list, p.runs, static_cast<float*>(p.dweights), order,
                  expert_m_blocks, p.oc, p.c, p.accumulate);
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
