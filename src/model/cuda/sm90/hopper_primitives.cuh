// PTX wrappers for Hopper (sm_90a) kernels: mbarriers, clusters, TMA tensor loads (multicast too)
// and stores, wgmma shared-memory descriptors and the m64n256k16 bf16 wgmma, the fences between
// them and the register reallocation of warp-specialised kernels. Device code only; included by
// sm90/*.cu.
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

namespace trainer {
namespace cuda {
namespace sm90 {

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarriers (shared::cta) ----
__device__ __forceinline__ void BarrierInit(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SharedAddress(bar)), "r"(count));
}
// Makes the initialised barriers visible to the async proxy (the TMA) and the other threads.
__device__ __forceinline__ void BarrierInitFence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void BarrierArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(SharedAddress(bar)) : "memory");
}
// Arrives and adds `bytes` to the transaction count the phase waits for (the TMA's bytes).
__device__ __forceinline__ void BarrierArriveExpectBytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SharedAddress(bar)),
               "r"(bytes)
               : "memory");
}
// Waits until the phase of the given parity has completed.
__device__ __forceinline__ void BarrierWait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(SharedAddress(bar)),
      "r"(parity)
      : "memory");
}

// ---- clusters of CTAs ----
// This CTA's rank in its cluster.
__device__ __forceinline__ uint32_t ClusterCtaRank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}
// Arrives on the barrier at bar's offset in the shared memory of the cluster's CTA `cta` (the
// default semantics, release at CTA scope: what it orders are this CTA's wgmma reads of a stage,
// complete before the arrival, against the other CTA's TMA writes into it).
__device__ __forceinline__ void BarrierArriveInCta(uint64_t* bar, uint32_t cta) {
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(SharedAddress(bar)),
      "r"(cta)
      : "memory");
}
// Every thread of every CTA of the cluster that has not exited arrives, then waits for the
// others (per thread: the threads of a warp need not be converged).
__device__ __forceinline__ void ClusterSync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// ---- TMA (2-D tensor maps; coordinates innermost first) ----
__device__ __forceinline__ void TmaPrefetchMap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
__device__ __forceinline__ void TmaLoad2d(void* dst, const CUtensorMap* map, uint64_t* bar, int x,
                                          int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, "
      "%4}], [%2];" ::"r"(SharedAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(SharedAddress(bar)), "r"(x), "r"(y)
      : "memory");
}
// The same box written to the same offset in the shared memory of each CTA in cta_mask (bit i:
// the cluster's CTA i), each CTA's barrier at bar's offset counting the bytes it receives.
__device__ __forceinline__ void TmaLoad2dMulticast(void* dst, const CUtensorMap* map, uint64_t* bar,
                                                   int x, int y, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::"
      "cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(SharedAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(SharedAddress(bar)), "r"(x), "r"(y), "h"(cta_mask)
      : "memory");
}
// A 1-D copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) into shared memory,
// counted on the barrier's transaction bytes.
__device__ __forceinline__ void BulkLoad(void* dst, const void* src, uint32_t bytes,
                                         uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(SharedAddress(dst)),
      "l"(src), "r"(bytes), "r"(SharedAddress(bar))
      : "memory");
}
// The same with an L2 eviction policy (from L2EvictFirstPolicy and the like).
__device__ __forceinline__ void TmaLoad2dHinted(void* dst, const CUtensorMap* map, uint64_t* bar,
                                                int x, int y, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
      "[%0], [%1, {%3, %4}], [%2], %5;" ::"r"(SharedAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(SharedAddress(bar)), "r"(x), "r"(y), "l"(policy)
      : "memory");
}
// An L2 policy for data not used again soon: its lines are evicted first.
__device__ __forceinline__ uint64_t L2EvictFirstPolicy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
// A 2-D TMA store of a box from shared memory, with an L2 eviction policy.
__device__ __forceinline__ void TmaStore2dHinted(const CUtensorMap* map, const void* src, int x,
                                                 int y, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3}], [%1], "
      "%4;" ::"l"(reinterpret_cast<uint64_t>(map)),
      "r"(SharedAddress(src)), "r"(x), "r"(y), "l"(policy)
      : "memory");
}
// The same box added to what is in global memory (the TMA's reduction: the L2 adds each element
// once, in the map's type, as an atomic add of that type would).
__device__ __forceinline__ void TmaReduceAdd2dHinted(const CUtensorMap* map, const void* src, int x,
                                                     int y, uint64_t policy) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group.L2::cache_hint "
      "[%0, {%2, %3}], [%1], %4;" ::"l"(reinterpret_cast<uint64_t>(map)),
      "r"(SharedAddress(src)), "r"(x), "r"(y), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void TmaStoreCommit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// Waits until the committed stores have read their shared memory (it may be reused then).
__device__ __forceinline__ void TmaStoreWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
// Waits until the committed stores have completed.
__device__ __forceinline__ void TmaStoreWaitAll() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
// Orders this thread's generic-proxy shared-memory writes before later async-proxy (TMA) accesses.
__device__ __forceinline__ void FenceSharedForAsyncProxy() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---- warpgroups ----
template <int kRegisters>
__device__ __forceinline__ void RegistersDecrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void RegistersIncrease() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
// A barrier among `threads` threads (a multiple of 32) with id 1-15 (0 is __syncthreads).
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- wgmma ----
// The descriptor of a K-major bf16 tile in shared memory as the TMA writes it with 128B swizzle:
// rows of 64 elements (128 bytes), 8-row groups 1024 bytes apart, the tile 1024-byte aligned.
// Moving along K by 16 elements within the row adds 32 bytes to the start address.
__device__ __forceinline__ uint64_t WgmmaDescriptorSwizzle128(const void* tile) {
  const uint64_t start = (SharedAddress(tile) & 0x3FFFF) >> 4;
  constexpr uint64_t kLeading = 1, kStride = 1024 >> 4, kSwizzle128 = 1;
  return start | (kLeading << 16) | (kStride << 32) | (kSwizzle128 << 62);
}
// The descriptor of an N-major bf16 tile (B stored (K, N) row-major) as the TMA writes it with
// 128B swizzle, in boxes of 64 K-rows of 64 N-elements (8 KB each, one after the other): within
// a box 8-row groups 1024 bytes apart (the stride offset), the boxes along N 8 KB apart (the
// leading offset). Moving along K by 16 rows adds 2048 bytes to the start address.
__device__ __forceinline__ uint64_t WgmmaDescriptorSwizzle128NMajor(const void* tile) {
  const uint64_t start = (SharedAddress(tile) & 0x3FFFF) >> 4;
  constexpr uint64_t kLeading = 8192 >> 4, kStride = 1024 >> 4, kSwizzle128 = 1;
  return start | (kLeading << 16) | (kStride << 32) | (kSwizzle128 << 62);
}
// Orders register accesses before the wgmma that follow (accumulators written by other code).
__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most `kPending` committed wgmma groups of this warpgroup are still running.
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accumulator accesses across wgmma boundaries.
__device__ __forceinline__ void WgmmaFenceOperand(float& r) {
  asm volatile("" : "+f"(r)::"memory");
}

// d (64 x 256 f32, the wgmma accumulator fragment) (+)= A (64 x 16) B (256 x 16)^T, bf16 in
// shared memory (descriptors above): A K-major or, with kAMMajor, M-major (stored (K, M), the
// instruction's imm-trans-a; its descriptor as an N-major B's), B K-major or, with kBNMajor,
// N-major (imm-trans-b); accumulate = false overwrites d.
template <bool kBNMajor = false, bool kAMMajor = false>
__device__ __forceinline__ void WgmmaM64N256K16(float* d, uint64_t desc_a, uint64_t desc_b,
                                                bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
      "%127}, "
      "%128, %129, p, 1, 1, %132, %131;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kBNMajor ? 1 : 0),
        "n"(kAMMajor ? 1 : 0));
}

}  // namespace sm90
}  // namespace cuda
}  // namespace trainer
