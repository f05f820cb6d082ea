// The MoE experts' grouped GEMMs on Hopper (sm_90a; grouped_gemm_sm90.h): every group's 128 x 256
// output tiles in one persistent launch. The mainloop is gemm_tiles.cuh's (a TMA thread feeding
// the stage ring, two multiplying warpgroups): a tile of block i (GroupedBlock) reads rows
// blocks[i].row .. + 127 of the row-side operand and the block's expert's rows of the stacked
// weights, (E * OC, C) as one matrix: K-major B rows e OC + n0 .. for the forward, N-major B
// k-blocks from row e OC for the input gradient. The rows past the group in a group's last block
// are multiplied like the others (the next group's rows, or the TMA's zeros past the tensor) and
// never stored. The multipliers write the tile (bf16) into the output tile in shared memory and go
// on to the next tile; the loading warpgroup's spare warps store the block's rows of it to global
// memory, 16 bytes a thread and a row a warp at a time, and hand the buffer back. The forward of
// a [gate | up] weight with SwiGLU (kForwardSwiGlu) multiplies, for output tile n0, the expert's
// gate and up rows of the same 128 features, and its spare warps store both halves and SwiGLU of
// them.
//
// The weight gradient is a kernel of its own on the same ring: A = dout^T (OC rows of the tile by
// the k-block's 64 rows of dout, M-major: two (64 rows, 64 columns) boxes of dout, one per
// multiplying warpgroup), B = in (N-major: four such boxes). A tile (expert, 128 of OC, 256 of C)
// walks the expert's runs (its groups) in 64-row k-blocks from each run's first row; where a
// k-block reaches past its run, the multipliers zero those rows of the stage (A's and B's: the rows
// past the run may be another group's or hold anything) before multiplying it. Each multiplying
// warpgroup then hands its 64 rows of the f32 tile to the TMA through its half of the output tile
// region, which stores them (or adds them to dW) while it goes on to the next tile: each tile is
// one expert's own block of dW, written by one CTA, in a fixed order of the rows. Where asked (dW
// overwritten), each multiplying warp also leaves the sum of the squares of its accumulators in
// its slot of tile_squares, for the step's gradient norm (in a fixed order: no atomics).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "model/cuda/cuda_common.cuh"
#include "model/cuda/sm90/gemm_tiles.cuh"
#include "model/cuda/sm90/grouped_gemm_sm90.h"

namespace trainer {
namespace cuda {
namespace {

using namespace sm90;

constexpr int kSharedBytes = KernelSharedBytes(0);

// 16-byte chunk k (columns 8k .. 8k + 7) of row r of the output tile (bf16, four swizzled boxes
// of (128, 64)): box k / 8, at (k % 8) ^ (r % 8) of the box row's 16-byte slots (the 128B
// swizzle).
__device__ __forceinline__ uint4 TileChunk(const uint8_t* out_tile, int r, int k) {
  return *reinterpret_cast<const uint4*>(out_tile + k / 8 * kBoxBytes + r * 128 +
                                         ((k % 8) ^ (r % 8)) * 16);
}

// The first `rows` rows of the output tile to rows row0 .. row0 + rows - 1, columns n0 .. n0 + 255
// of `out` (row-major, `cols` columns), by `threads` threads (thread: this one's index among
// them); chunk c is row c / 32, 16-byte chunk c % 32 of it.
__device__ __forceinline__ void StoreTileRows(const uint8_t* out_tile, uint8_t* out, int64_t cols,
                                              int64_t row0, int n0, int rows, int thread,
                                              int threads) {
  for (int c = thread; c < rows * 32; c += threads) {
    const int r = c / 32, chunk = c % 32;
    *reinterpret_cast<uint4*>(out + ((row0 + r) * cols + n0 + chunk * 8) * 2) =
        TileChunk(out_tile, r, chunk);
  }
}

// The forward + SwiGLU's tile: [gate | up], features f0 .. f0 + 127 of each (boxes 0-1 and 2-3);
// its first `rows` rows to h's columns f0.. and F + f0.. (as StoreTileRows would store the two
// halves) and silu(gate) * up to act's columns f0.. (h (rows, 2F), act (rows, F) row-major).
__device__ __forceinline__ void StoreSwiGluTileRows(const uint8_t* out_tile, uint8_t* h,
                                                    uint8_t* act, int64_t F, int64_t row0, int f0,
                                                    int rows, int thread, int threads) {
  constexpr int kHalfChunks = kBlockN / 2 / 8;  // 16-byte chunks of one half's row: 16
  for (int c = thread; c < rows * kHalfChunks; c += threads) {
    const int r = c / kHalfChunks, chunk = c % kHalfChunks;
    const uint4 gate = TileChunk(out_tile, r, chunk),
                up = TileChunk(out_tile, r, chunk + kHalfChunks);
    const int64_t row = row0 + r, col = f0 + chunk * 8;
    *reinterpret_cast<uint4*>(h + (row * 2 * F + col) * 2) = gate;
    *reinterpret_cast<uint4*>(h + (row * 2 * F + F + col) * 2) = up;
    const bf16* g = reinterpret_cast<const bf16*>(&gate);
    const bf16* u = reinterpret_cast<const bf16*>(&up);
    uint4 out;
    bf16* y = reinterpret_cast<bf16*>(&out);
#pragma unroll
    for (int k = 0; k < 8; ++k) y[k] = FromFloat<bf16>(SwiGluOf(ToFloat(g[k]), ToFloat(u[k])));
    *reinterpret_cast<uint4*>(act + (row * F + col) * 2) = out;
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
// expert_rows: OC, the rows of one expert's matrix; out_cols: N. kSwiGlu (K-major, the map's
// boxes half a tile high): output tile n0's B rows are the expert's gate rows n0 / 2 .. + 127 and
// up rows OC / 2 + n0 / 2 .. + 127, stored by StoreSwiGluTileRows with act.
template <BMajor kB, bool kSwiGlu = false>
__global__ void __launch_bounds__(kThreads, 1)
    GroupedGemmKernel(const __grid_constant__ CUtensorMap a_map,
                      const __grid_constant__ CUtensorMap b_map, const GroupedBlock* blocks,
                      uint8_t* out, TileOrder order, int k_blocks, int expert_rows,
                      int64_t out_cols, uint8_t* act) {
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
      if (kSwiGlu)
        StoreSwiGluTileRows(s.out_tile, out, act, out_cols / 2, block.row, n0 / 2, rows,
                            threadIdx.x - 32, kSpareThreads);
      else
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
        if (kSwiGlu)  // B rows: the expert's gate and up features n0 / 2 ..
          LoadTile<BMajor::kK>(s, &a_map, &b_map, block.row, expert_row + n0 / 2, k_blocks, &ring,
                               0, nullptr, nullptr, 0, 0, expert_row + expert_rows / 2 + n0 / 2);
        else if (kB == BMajor::kK)  // B rows: the expert's output features n0 ..
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

// The weight gradient's f32 output through shared memory: each multiplying warpgroup's 64 rows
// of the tile (256 columns) go out through its own half of the output tile region (32 KB: four
// (64 rows, 32 columns) f32 boxes of 8 KB in the TMA's 128B swizzle), 128 columns at a time, which
// its first thread stores by TMA (or, accumulating, adds: the TMA's reduction, one f32 add per
// element in the L2, as the adds in place it replaces did in registers, up to subnormals, which
// the L2's f32 adds may flush to zero) while the warpgroup goes on. Stored from the
// registers instead, the multipliers waited on each tile's 128 KB: on an H100 the weight gradient
// of 48-64 groups (~16k rows, 2048 x 2048) ran 223-228 TFLOP/s that way, 251-258 this way.
constexpr int kF32BoxCols = 32;                     // one 128-byte swizzle row
constexpr int kF32BoxBytes = 64 * kF32BoxCols * 4;  // 8 KB
constexpr int kF32RegionBytes = kOutTileBytes / 2;  // a warpgroup's: 4 boxes
constexpr int kF32RoundCols = 4 * kF32BoxCols;      // 128 columns a round
static_assert(kBlockN == 2 * kF32RoundCols, "a tile's half in two rounds");

// This thread's accumulator pairs of columns [128 round, 128 round + 128) (pair 2j + h: row
// 16 warp + lane / 4 + 8 h of the half, columns 8 j + 2 (lane % 4) + {0, 1}) into the region's
// boxes. A box row is 128 bytes; its 16-byte chunk c sits at c ^ (row % 8), and row % 8 = lane / 4.
__device__ __forceinline__ void AccumulatorsToRegion(const float* acc, uint8_t* region, int round) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
#pragma unroll
  for (int jj = 0; jj < kF32RoundCols / 8; ++jj) {
    const int j = kF32RoundCols / 8 * round + jj;
    const int chunk = 2 * (j % 4) + (lane % 4) / 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp * 16 + lane / 4 + 8 * h;
      uint8_t* p =
          region + jj / 4 * kF32BoxBytes + row * 128 + ((chunk ^ (lane / 4)) * 16) + (lane % 2) * 8;
      *reinterpret_cast<float2*>(p) = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    }
  }
}

// The warpgroup's 64 rows of the tile to dW (x0: the tile's first column of C, y0: its half's
// first row of E * OC) by TMA through `region`; `barrier`: the warpgroup's named barrier. The
// region is free again once the TMA has read it: waited for before it is written next.
__device__ __forceinline__ void StoreAccumulatorsByTma(const float* acc, uint8_t* region,
                                                       const CUtensorMap* map, int x0, int y0,
                                                       bool accumulate, int barrier) {
  const bool leader = threadIdx.x % 128 == 0;
#pragma unroll
  for (int round = 0; round < 2; ++round) {
    if (leader) TmaStoreWaitRead();
    NamedBarrierSync(barrier, 128);
    AccumulatorsToRegion(acc, region, round);
    FenceSharedForAsyncProxy();
    NamedBarrierSync(barrier, 128);
    if (!leader) continue;
    const uint64_t evict_first = L2EvictFirstPolicy();
    for (int box = 0; box < 4; ++box) {
      const int x = x0 + kF32RoundCols * round + kF32BoxCols * box;
      if (accumulate)
        TmaReduceAdd2dHinted(map, region + box * kF32BoxBytes, x, y0, evict_first);
      else
        TmaStore2dHinted(map, region + box * kF32BoxBytes, x, y0, evict_first);
    }
    TmaStoreCommit();
  }
}

// The sum of the squares of a warp's accumulators in f64, as SumInto's pass sums them (each
// thread's 128 in order, then the warp's 32 by a fixed butterfly) to its slot of the tile's: warp
// w of warpgroup `half` of the t-th tile writes tile_squares[8 t + 4 half + w].
__device__ __forceinline__ void StoreWarpSquares(const float* acc, double* tile_squares, int t,
                                                 int half) {
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < 128; ++i) sum = fma(double(acc[i]), double(acc[i]), sum);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0)
    tile_squares[kSquaresPerTile * t + 4 * half + (threadIdx.x % 128) / 32] = sum;
}

__global__ void __launch_bounds__(kThreads, 1)
    GroupedWeightGradientKernel(const __grid_constant__ CUtensorMap dout_map,
                                const __grid_constant__ CUtensorMap in_map,
                                const __grid_constant__ CUtensorMap dw_map,
                                const GroupedExpert* experts, const GroupedBlock* runs,
                                TileOrder order, int expert_m_blocks, int oc, bool accumulate,
                                double* tile_squares) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t shared_raw[];
  const TileShared s = CarveTileShared(shared_raw);
  const int warpgroup = threadIdx.x / 128;
  const int tiles = order.groups();
  if (threadIdx.x == 0) {
    InitRing(s, &dout_map, &in_map, nullptr, &dw_map, 1);
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
      if (tile_squares != nullptr) StoreWarpSquares(acc, tile_squares, t, half);
      StoreAccumulatorsByTma(acc, s.out_tile + half * kF32RegionBytes, &dw_map, n0,
                             e.expert * oc + m0 + half * 64, accumulate, 4 + half);
    }
    if (threadIdx.x % 128 == 0) TmaStoreWaitAll();  // this warpgroup's last stores are done
  }
#endif
}

// A row-major f32 (rows, cols) matrix as the weight gradient's boxes: (64 rows, 32 columns), 128B
// swizzle.
bool MakeF32BoxMap(CUtensorMap* map, void* base, int64_t rows, int64_t cols) {
  return MakeSwizzledMap(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, base, rows, cols, 64,
                         kF32BoxCols);
}

// The problem's GEMM: A (m, k) the row-side input, B the weights, the output n columns wide.
struct GroupedShape {
  int64_t k, n;
  BMajor b_major;
};
GroupedShape ShapeOf(const GroupedSm90Problem& p) {
  if (p.op != GroupedSm90Op::kInputGradient) return {p.c, p.oc, BMajor::kK};
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
         Aligned16(p.blocks) &&
         (p.op != GroupedSm90Op::kForwardSwiGlu || (p.act != nullptr && Aligned16(p.act)));
}

cudaError_t LaunchGroupedSm90(const GroupedSm90Problem& p, cudaStream_t stream) {
  if (!GroupedSm90Supported(p)) return cudaErrorNotSupported;
  if (p.block_count == 0) return cudaSuccess;
  const GroupedShape shape = ShapeOf(p);
  const bool swiglu = p.op == GroupedSm90Op::kForwardSwiGlu;
  CUtensorMap a_map, b_map;
  const uint32_t b_box_rows =
      shape.b_major == BMajor::kN ? kBlockK : (swiglu ? kBlockN / 2 : kBlockN);
  if (!MakeTileMap(&a_map, p.rows_in, p.m, shape.k, kBlockM) ||
      !MakeTileMap(&b_map, p.weights, p.experts * p.oc, p.c, b_box_rows))
    return cudaErrorInvalidValue;
  const TileOrder order{static_cast<int>(p.block_count), static_cast<int>(shape.n / kBlockN), 1};
  auto* kernel = swiglu ? GroupedGemmKernel<BMajor::kK, true>
                        : (shape.b_major == BMajor::kK ? GroupedGemmKernel<BMajor::kK>
                                                       : GroupedGemmKernel<BMajor::kN>);
  const cudaError_t e = LaunchTiled(
      kernel, kSharedBytes, p.block_count * kBlockM, shape.n, 1, stream, a_map, b_map, p.blocks,
      static_cast<uint8_t*>(p.rows_out), order, static_cast<int>(shape.k / kBlockK),
      static_cast<int>(p.oc), shape.n, static_cast<uint8_t*>(p.act));
  return e != cudaSuccess ? e : cudaGetLastError();
}

int64_t GroupedSm90WeightGradientSquares(const GroupedSm90WeightGradient& p) {
  return p.expert_count * (p.oc / kBlockM) * (p.c / kBlockN) * kSquaresPerTile;
}

bool GroupedSm90WeightGradientSupported(const GroupedSm90WeightGradient& p) {
  constexpr int64_t kIntLimit = int64_t{1} << 31;
  return CurrentDevice().sm90 && EncodeTiled() != nullptr && p.m > 0 && p.m < kIntLimit &&
         p.experts > 0 && p.oc > 0 && p.c > 0 && p.oc % kBlockN == 0 && p.c % kBlockN == 0 &&
         p.experts * p.oc < kIntLimit && p.c < kIntLimit && p.expert_count >= 0 &&
         p.expert_count <= p.experts && (p.expert_count == 0 || p.expert_list != nullptr) &&
         (p.expert_count == 0 || p.runs != nullptr) && Aligned16(p.dout) && Aligned16(p.in) &&
         Aligned16(p.dweights) && Aligned16(p.expert_list) && Aligned16(p.runs);
}

cudaError_t LaunchGroupedSm90WeightGradient(const GroupedSm90WeightGradient& p,
                                            cudaStream_t stream) {
  if (!GroupedSm90WeightGradientSupported(p)) return cudaErrorNotSupported;
  if (p.expert_count == 0) return cudaSuccess;
  CUtensorMap dout_map, in_map, dw_map;
  if (!MakeTileMap(&dout_map, p.dout, p.m, p.oc, kBlockK) ||
      !MakeTileMap(&in_map, p.in, p.m, p.c, kBlockK) ||
      !MakeF32BoxMap(&dw_map, p.dweights, p.experts * p.oc, p.c))
    return cudaErrorInvalidValue;
  const int expert_m_blocks = static_cast<int>(p.oc / kBlockM);
  const int64_t m_blocks = p.expert_count * expert_m_blocks;
  const TileOrder order{static_cast<int>(m_blocks), static_cast<int>(p.c / kBlockN), 1};
  const cudaError_t e =
      LaunchTiled(GroupedWeightGradientKernel, kSharedBytes, m_blocks * kBlockM, p.c, 1, stream,
                  dout_map, in_map, dw_map, p.expert_list, p.runs, order, expert_m_blocks,
                  static_cast<int>(p.oc), p.accumulate, p.tile_squares);
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
