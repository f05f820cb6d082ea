// What the sm90 GEMMs share (gemm_dgelu.cu, gemm_gelu_forward.cu, grouped_gemm_sm90.cu): the
// 128 x 256 tile and its shared-memory layout (a ring of kStages k-blocks of A (128, 64) and B
// (256, 64), then one 64 KB output tile as four (128, 64) boxes, all in the TMA's 128B swizzle),
// the loader's k-block loop, the multipliers' k-block loop (two warpgroups, 64 rows each,
// m64n256k16 wgmma), where a thread's accumulator pairs sit in the output tile, and the host side:
// 2-D tensor maps, the device check. Persistent kernels: one CTA per SM, 384 threads (warpgroup 0
// loads, 1 and 2 multiply).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cassert>
#include <cstdint>
#include <mutex>
#include <utility>

#include "model/cuda/sm90/hopper_primitives.cuh"

namespace trainer {
namespace cuda {
namespace sm90 {

constexpr int kBlockM = 128, kBlockN = 256, kBlockK = 64, kStages = 3;
constexpr int kThreads = 384;
constexpr int kATileBytes = kBlockM * kBlockK * 2;    // 16 KB
constexpr int kBTileBytes = kBlockN * kBlockK * 2;    // 32 KB
constexpr int kBoxCols = 64;                          // one 128-byte swizzle row
constexpr int kTileBoxes = kBlockN / kBoxCols;        // boxes across a tile (and a B k-block): 4
constexpr int kBoxBytes = kBlockM * kBoxCols * 2;     // 16 KB
constexpr int kOutTileBytes = kBlockM * kBlockN * 2;  // 64 KB
constexpr int kSpareThreads = 96;                     // warps 1-3 of the loading warpgroup
constexpr int kLoaderRegisters = 56, kMultiplierRegisters = 224;  // 128 x 56 + 256 x 224 <= 64K
constexpr int kTileSharedBytes = kStages * (kATileBytes + kBTileBytes) + kOutTileBytes;

constexpr int kBarrierBytes = 256;  // the ring's barriers, then the kernel's own
// A kernel's dynamic shared memory: the tiles, the barriers, `extra_bytes` of its own buffers,
// and room to align the tiles to 1024 bytes.
constexpr int KernelSharedBytes(int extra_bytes) {
  return kTileSharedBytes + kBarrierBytes + extra_bytes + 1024;
}

// Dynamic shared memory carved up: the 1024-byte aligned tile region, the ring's barriers (full:
// the loader's arrival and the TMA's bytes; empty: lane 0 of each of the 8 multiplying warps),
// the kernel's own barriers after them, and its buffers (`rest`, kBarrierBytes past the ring's).
struct TileShared {
  uint8_t* a_tiles;   // (kStages, 128, 64)
  uint8_t* b_tiles;   // (kStages, 256, 64)
  uint8_t* out_tile;  // 4 boxes of (128, 64)
  uint64_t* full;     // kStages
  uint64_t* empty;    // kStages
  uint64_t* own_barriers;
  uint8_t* rest;
};

__device__ __forceinline__ TileShared CarveTileShared(uint8_t* raw) {
  TileShared s;
  // Align by an offset added to the __shared__ array itself: rounding the pointer as an integer
  // loses its shared address space, and every epilogue access then compiles to a generic LD/ST.
  s.a_tiles = raw + ((1024 - (SharedAddress(raw) & 1023)) & 1023);
  s.b_tiles = s.a_tiles + kStages * kATileBytes;
  s.out_tile = s.b_tiles + kStages * kBTileBytes;
  s.full = reinterpret_cast<uint64_t*>(s.out_tile + kOutTileBytes);
  s.empty = s.full + kStages;
  s.own_barriers = s.empty + kStages;
  s.rest = s.out_tile + kOutTileBytes + kBarrierBytes;
  return s;
}

// Thread 0's part of a kernel's setup: the ring's barriers and the prefetch of the tensor maps
// (mn_map and out_map may be null: a kernel that stores without them). The kernel then initialises
// its own barriers, calls BarrierInitFence, and all threads
// __syncthreads (ClusterSync in clusters: the peer's barriers must be ready before it is sent
// anything). In a cluster of `cluster` CTAs a stage is free once the multiplying warps of all of
// them have read it (each CTA's loader writes its part of B into all of them).
__device__ __forceinline__ void InitRing(const TileShared& s, const CUtensorMap* a_map,
                                         const CUtensorMap* b_map, const CUtensorMap* mn_map,
                                         const CUtensorMap* out_map, int cluster) {
  for (int i = 0; i < kStages; ++i) {
    BarrierInit(&s.full[i], 1);
    BarrierInit(&s.empty[i], 8 * cluster);
  }
  TmaPrefetchMap(a_map);
  TmaPrefetchMap(b_map);
  if (mn_map != nullptr) TmaPrefetchMap(mn_map);
  if (out_map != nullptr) TmaPrefetchMap(out_map);
}

// Where in the ring the next k-block goes, and the parity of its barriers' phase.
struct RingPosition {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void Advance() {
    if (++stage == kStages) stage = 0, phase ^= 1;
  }
};

// How B is stored: (N, K) row-major (K-major, as a linear layer's weight for x W^T) or (K, N)
// row-major (N-major, the weight as stored for dY W). The ring holds either the same way the
// TMA writes it: one (256, 64) box, or four (64 K-rows, 64 N-elements) boxes of 8 KB.
enum class BMajor { kK, kN };
constexpr int kNMajorBoxBytes = kBlockK * kBoxCols * 2;  // 8 KB

// The loader (one thread): the tile's k-blocks of A (rows m0..) and B (its n0.. part) into the
// ring. With extra_bytes > 0, the first k-block's barrier also waits for a copy of that many bytes
// from extra_src to extra_dst (a tile's bias slice), issued with it. In a cluster of two (CTA
// `rank`, the two tiles one above the other, the same n0), each loader brings its half of B
// (K-major: rows; N-major: two of the four boxes) into both CTAs by multicast, so that each CTA
// reads 32 KB per k-block from the L2 instead of 48; each stage's barrier counts all 48 KB.
// N-major B's k-blocks start at its row b_k0 (a matrix of stacked ones: the grouped GEMMs').
// K-major B with b_second_half >= 0 (one CTA, the map's boxes half a tile high): the tile's first
// 128 rows of B from row n0, the other 128 from row b_second_half.
template <BMajor kB = BMajor::kK, int kCluster = 1>
__device__ __forceinline__ void LoadTile(const TileShared& s, const CUtensorMap* a_map,
                                         const CUtensorMap* b_map, int m0, int n0, int k_blocks,
                                         RingPosition* ring, int rank = 0,
                                         const void* extra_src = nullptr, void* extra_dst = nullptr,
                                         uint32_t extra_bytes = 0, int b_k0 = 0,
                                         int b_second_half = -1) {
  static_assert(kCluster == 1 || kCluster == 2, "clusters of one or two CTAs");
  assert(b_second_half < 0 || (kB == BMajor::kK && kCluster == 1));  // ignored elsewhere
  constexpr uint16_t kBothCtas = 0b11;
  for (int kb = 0; kb < k_blocks; ++kb) {
    uint64_t* bar = &s.full[ring->stage];
    BarrierWait(&s.empty[ring->stage], ring->phase ^ 1);
    BarrierArriveExpectBytes(bar, kATileBytes + kBTileBytes + (kb == 0 ? extra_bytes : 0));
    TmaLoad2d(s.a_tiles + ring->stage * kATileBytes, a_map, bar, kb * kBlockK, m0);
    uint8_t* b_tile = s.b_tiles + ring->stage * kBTileBytes;
    if (kB == BMajor::kK && kCluster == 1 && b_second_half >= 0) {
      TmaLoad2d(b_tile, b_map, bar, kb * kBlockK, n0);
      TmaLoad2d(b_tile + kBTileBytes / 2, b_map, bar, kb * kBlockK, b_second_half);
    } else if (kB == BMajor::kK && kCluster == 1) {
      TmaLoad2d(b_tile, b_map, bar, kb * kBlockK, n0);
    } else if (kB == BMajor::kK) {
      TmaLoad2dMulticast(b_tile + rank * (kBTileBytes / 2), b_map, bar, kb * kBlockK,
                         n0 + rank * (kBlockN / 2), kBothCtas);
    } else {
      constexpr int kBoxes = kTileBoxes / kCluster;  // this CTA's boxes
      for (int box = rank * kBoxes; box < (rank + 1) * kBoxes; ++box) {
        if (kCluster == 1)
          TmaLoad2d(b_tile + box * kNMajorBoxBytes, b_map, bar, n0 + box * kBoxCols,
                    b_k0 + kb * kBlockK);
        else
          TmaLoad2dMulticast(b_tile + box * kNMajorBoxBytes, b_map, bar, n0 + box * kBoxCols,
                             b_k0 + kb * kBlockK, kBothCtas);
      }
    }
    if (kb == 0 && extra_bytes > 0) BulkLoad(extra_dst, extra_src, extra_bytes, bar);
    ring->Advance();
  }
}

// What the multipliers do to a k-block's stage before multiplying it: nothing, or (another
// functor) fix its contents up (their generic writes then need FenceSharedForAsyncProxy).
struct KeepStage {
  __device__ __forceinline__ void operator()(int /*stage*/) const {}
};

// The multipliers (both warpgroups): acc = A (this half's 64 rows) B^T over the tile's k-blocks.
// A as the TMA writes it: K-major, one (128, 64) box; or, with kAMMajor, M-major (stored (K, M),
// as A^T), two (64 K-rows, 64 M-elements) boxes of 8 KB, one per half. prepare(stage) runs once
// each k-block's stage has landed, before its wgmma. Each k-block's stage goes back to the loader
// once its wgmma have completed (one group stays in flight), in a cluster to the loaders of all
// its CTAs.
template <BMajor kB = BMajor::kK, int kCluster = 1, bool kAMMajor = false,
          typename Prepare = KeepStage>
__device__ __forceinline__ void MultiplyTile(float* acc, const TileShared& s, int half,
                                             int k_blocks, RingPosition* ring,
                                             Prepare&& prepare = Prepare()) {
  const bool lane0 = threadIdx.x % 32 == 0;
  auto release = [&](int stage) {
    if (!lane0) return;
    BarrierArrive(&s.empty[stage]);
    if (kCluster == 2) BarrierArriveInCta(&s.empty[stage], ClusterCtaRank() ^ 1);  // the other
  };
  int previous = 0;
  for (int kb = 0; kb < k_blocks; ++kb) {
    BarrierWait(&s.full[ring->stage], ring->phase);
    prepare(ring->stage);
    const uint8_t* a_tile = s.a_tiles + ring->stage * kATileBytes;
    const uint64_t desc_a = kAMMajor
                                ? WgmmaDescriptorSwizzle128NMajor(a_tile + half * kNMajorBoxBytes)
                                : WgmmaDescriptorSwizzle128(a_tile + half * 64 * 128);
    const uint8_t* b_tile = s.b_tiles + ring->stage * kBTileBytes;
    const uint64_t desc_b = kB == BMajor::kK ? WgmmaDescriptorSwizzle128(b_tile)
                                             : WgmmaDescriptorSwizzle128NMajor(b_tile);
    // Along K by 16: K-major, 32 bytes within the rows (2 in the address field); N-major, 16
    // rows of 128 bytes (128).
    constexpr uint64_t kBStep = kB == BMajor::kK ? 2 : 128;
    constexpr uint64_t kAStep = kAMMajor ? 128 : 2;  // the same for A
#pragma unroll
    for (int i = 0; i < 128; ++i) WgmmaFenceOperand(acc[i]);
    WgmmaFence();
#pragma unroll
    for (int k = 0; k < kBlockK / 16; ++k)
      WgmmaM64N256K16<kB == BMajor::kN, kAMMajor>(acc, desc_a + kAStep * k, desc_b + kBStep * k,
                                                  kb > 0 || k > 0);
    WgmmaCommit();
#pragma unroll
    for (int i = 0; i < 128; ++i) WgmmaFenceOperand(acc[i]);
    if (kb > 0) {
      WgmmaWait<1>();
      release(previous);
    }
    previous = ring->stage;
    ring->Advance();
  }
  WgmmaWait<0>();
#pragma unroll
  for (int i = 0; i < 128; ++i) WgmmaFenceOperand(acc[i]);
  release(previous);
}

// Where this thread's accumulator pair 2j + h (acc[4j + 2h], acc[4j + 2h + 1]) sits in the output
// tile: row 16 warp + lane / 4 + 8h of its half, columns 8j + 2 (lane % 4) + {0, 1}. The TMA's
// 128B swizzle puts a box row's 16-byte chunk c at c ^ (row % 8), and row % 8 = lane / 4 here, so
// a warp's 32 accesses fall in 32 different banks.
__device__ __forceinline__ uint8_t* PairInTile(uint8_t* out_tile, int half, int j, int h) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  const int row = half * 64 + warp * 16 + lane / 4 + 8 * h;
  return out_tile + j / 8 * kBoxBytes + row * 128 + ((j % 8) ^ (lane / 4)) * 16 + (lane % 4) * 4;
}

// The output tile's four boxes stored by TMA (one thread), their lines marked to leave the L2
// first (nothing reads them again before they would be evicted anyway, and the operands the other
// CTAs still multiply then keep their place); commits them as one group.
__device__ __forceinline__ void StoreTile(const CUtensorMap* map, const uint8_t* out_tile, int m0,
                                          int n0) {
  const uint64_t evict_first = L2EvictFirstPolicy();
  for (int box = 0; box < kTileBoxes; ++box)
    TmaStore2dHinted(map, out_tile + box * kBoxBytes, n0 + box * kBoxCols, m0, evict_first);
  TmaStoreCommit();
}

// The order in which a persistent grid takes the tiles: bands of kBandRows block rows, each band
// column by column (down the band's rows first). The CTAs at work at one time then read a few
// rows of A and a part of B instead of all of B (1.3B's 32 MB B does not stay in the L2 when
// taken row by row): on an H200 1.3B's GELU GEMMs run 7-8% faster than row by row, 350M's 2%.
// In clusters of two, each cluster takes a group of two tiles one above the other (block rows
// 2i and 2i + 1 of one block column), the groups in the same order.
constexpr int kBandRows = 8;
struct TileOrder {
  int m_blocks, n_blocks;
  int cluster = 1;  // CTAs per cluster (m_blocks a multiple of it)
  __device__ __forceinline__ int groups() const { return m_blocks / cluster * n_blocks; }
  // The tile of CTA `rank` of the cluster that takes group `group`.
  __device__ __forceinline__ void Coordinates(int group, int rank, int* m0, int* n0) const {
    const int units = m_blocks / cluster, band_units = kBandRows / cluster;
    const int band_groups = band_units * n_blocks;
    const int first = group / band_groups * band_units;
    const int rows = units - first < band_units ? units - first : band_units;
    const int in_band = group % band_groups;
    *m0 = ((first + in_band % rows) * cluster + rank) * kBlockM;
    *n0 = in_band / rows * kBlockN;
  }
};

// ---- host side ----

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled from the driver, found through the runtime (no link to libcuda).
inline EncodeTiledFn EncodeTiled() {
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

// A row-major (rows, cols) matrix of `type` (element_bytes each) as boxes of (box_rows,
// box_cols) with 128B swizzle (box_cols * element_bytes = 128: one swizzle row).
inline bool MakeSwizzledMap(CUtensorMap* map, CUtensorMapDataType type, int element_bytes,
                            const void* base, int64_t rows, int64_t cols, uint32_t box_rows,
                            uint32_t box_cols) {
  EncodeTiledFn encode = EncodeTiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * element_bytes};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode(map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// A row-major bf16 (rows, cols) matrix as boxes of (box_rows, 64) with 128B swizzle.
inline bool MakeTileMap(CUtensorMap* map, const void* base, int64_t rows, int64_t cols,
                        uint32_t box_rows) {
  return MakeSwizzledMap(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, rows, cols, box_rows,
                         kBoxCols);
}

struct DeviceInfo {
  bool sm90 = false;  // compute capability 9.0 exactly: sm_90a code runs nowhere else
  int sms = 0;
};

inline DeviceInfo CurrentDevice() {
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

// Whether a (m, n, k) problem fits the tiles (in clusters of `cluster` CTAs, 1 or 2) and the
// device runs sm_90a code.
inline bool TilesFit(int64_t m, int64_t n, int64_t k, int cluster = 1) {
  return CurrentDevice().sm90 && EncodeTiled() != nullptr && (cluster == 1 || cluster == 2) &&
         m > 0 && n > 0 && k > 0 && m % (kBlockM * cluster) == 0 && n % kBlockN == 0 &&
         k % kBlockK == 0 && m < (1ll << 31) && n < (1ll << 31) && k < (1ll << 31);
}

// The maps of a tiled GEMM's operands: A (m, k) and B ((n, k), or (k, n) when N-major) as the
// mainloop reads them (K-major B in clusters of two: half a tile's rows per box), and two (m, n)
// matrices in output tiles (the epilogue's other input or second output, and its output).
inline bool MakeGemmMaps(CUtensorMap* a_map, CUtensorMap* b_map, CUtensorMap* mn_map,
                         CUtensorMap* out_map, const void* a, const void* b, const void* mn,
                         const void* out, int64_t m, int64_t n, int64_t k,
                         BMajor b_major = BMajor::kK, int cluster = 1) {
  const bool b_made = b_major == BMajor::kK ? MakeTileMap(b_map, b, n, k, kBlockN / cluster)
                                            : MakeTileMap(b_map, b, k, n, kBlockK);
  return MakeTileMap(a_map, a, m, k, kBlockM) && b_made && MakeTileMap(mn_map, mn, m, n, kBlockM) &&
         MakeTileMap(out_map, out, m, n, kBlockM);
}

// The launch of `kernel` (shared_bytes of dynamic shared memory) on a persistent grid for an
// (m, n) output in clusters of `cluster` CTAs: one CTA per SM, as many clusters as fit at once (an
// SM left over in a GPC stays idle) and no more than there are groups of tiles. `attribute`
// holds the cluster's shape for `config`.
template <typename... Params>
inline cudaError_t TiledLaunchConfig(void (*kernel)(Params...), int shared_bytes, int64_t m,
                                     int64_t n, int cluster, cudaStream_t stream,
                                     cudaLaunchConfig_t* config, cudaLaunchAttribute* attribute) {
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes);
  if (e != cudaSuccess) return e;
  attribute->id = cudaLaunchAttributeClusterDimension;
  attribute->val.clusterDim.x = cluster, attribute->val.clusterDim.y = 1;
  attribute->val.clusterDim.z = 1;
  *config = {};
  config->blockDim = dim3(kThreads);
  config->dynamicSmemBytes = shared_bytes;
  config->stream = stream;
  config->attrs = attribute;
  config->numAttrs = cluster > 1 ? 1 : 0;
  int64_t clusters = CurrentDevice().sms / cluster;
  if (cluster > 1) {
    config->gridDim = dim3(static_cast<unsigned>(clusters * cluster));
    int fit = 0;
    e = cudaOccupancyMaxActiveClusters(&fit, kernel, config);
    if (e != cudaSuccess) return e;
    if (fit <= 0) return cudaErrorNotSupported;
    clusters = fit < clusters ? fit : clusters;
  }
  const int64_t groups = (m / kBlockM / cluster) * (n / kBlockN);
  config->gridDim = dim3(static_cast<unsigned>((groups < clusters ? groups : clusters) * cluster));
  return cudaSuccess;
}

template <typename... Params, typename... Args>
inline cudaError_t LaunchTiled(void (*kernel)(Params...), int shared_bytes, int64_t m, int64_t n,
                               int cluster, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config;
  cudaLaunchAttribute attribute;
  const cudaError_t e =
      TiledLaunchConfig(kernel, shared_bytes, m, n, cluster, stream, &config, &attribute);
  return e != cudaSuccess ? e : cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

inline bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace sm90
}  // namespace cuda
}  // namespace trainer
