// The sm_90a instructions under the warpgroup products (wgmma_gemm.cuh, wgmma_tma_conv.cuh):
// wgmma.mma_async, whose operands the tensor cores read from shared memory through matrix descriptors
// (no ldmatrix, no fragment registers), its fences, the proxy fence that orders cp.async's writes (the
// generic proxy) before wgmma's reads (the async proxy), and the mbarriers and TMA copies of the TMA
// form. They are compiled only into code built for sm_90a (CMAKE_CUDA_ARCHITECTURES "90a-real");
// elsewhere they compile to a trap or to nothing, and the planner never picks the warpgroup products
// (wgmma_available, cuda/launch.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cnn/choices.hpp"
#include "ops/mma_instructions.cuh"

namespace cnn::cuda {

// Whether this translation unit's device code has the sm_90a instructions (see wgmma_available).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CNN_HAVE_WGMMA 1
#else
#define CNN_HAVE_WGMMA 0
#endif

// The descriptor of a K-major operand tile in shared memory whose rows are 64 bytes (one k tile of
// kMmaTileWords words) in the 64-byte swizzle (Swizzled64Rows, mma_operand_pipes.cuh): the start
// address, 512 bytes from one 8-row group to the next, layout type 2 (64-byte swizzle). The leading
// offset is unused by swizzled K-major layouts (1 by convention). The tile starts on a 512-byte
// boundary, where the swizzle pattern starts; a k step within the rows adds its byte offset to the
// start address (wgmma_advance), as the hardware swizzles the address it computes.
__device__ __forceinline__ std::uint64_t wgmma_descriptor(unsigned shared_address) {
  return static_cast<std::uint64_t>((shared_address & 0x3FFFF) >> 4) | (std::uint64_t{1} << 16) |
         (std::uint64_t{512 >> 4} << 32) | (std::uint64_t{2} << 62);
}
// The descriptor moved on by `bytes` (a multiple of 16).
__device__ __forceinline__ std::uint64_t wgmma_advance(std::uint64_t descriptor, unsigned bytes) {
  return descriptor + (bytes >> 4);
}

// Orders this thread's completed cp.async writes to shared memory before the async proxy's reads.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if CNN_HAVE_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Before a warpgroup's wgmma: orders the accumulators' registers and shared memory before them.
__device__ __forceinline__ void wgmma_fence() {
#if CNN_HAVE_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
// Closes the group of the wgmma issued since the last commit.
__device__ __forceinline__ void wgmma_commit() {
#if CNN_HAVE_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most kPending of this warpgroup's wgmma groups are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#if CNN_HAVE_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}
// Keeps the compiler from moving other reads or writes of the accumulators across a wgmma in flight.
template <int kCount>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ---- mbarriers and TMA (the warpgroup product over tensor maps, wgmma_tma_conv.cuh) ----------------

// A shared-memory mbarrier that `count` arrivals complete (with the bytes they announce).
__device__ __forceinline__ void mbarrier_init(std::uint64_t* barrier, unsigned count) {
#if CNN_HAVE_WGMMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(count) : "memory");
#else
  (void)barrier, (void)count;
#endif
}
// Makes the initialised mbarriers visible to the async proxy (the TMA unit) before their first use.
__device__ __forceinline__ void fence_mbarrier_init() {
#if CNN_HAVE_WGMMA
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// Arrives on the barrier and announces `bytes` that copies will complete on it.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(std::uint64_t* barrier, unsigned bytes) {
#if CNN_HAVE_WGMMA
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(bytes)
               : "memory");
#else
  (void)barrier, (void)bytes;
#endif
}
// Waits until the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(std::uint64_t* barrier, unsigned parity) {
#if CNN_HAVE_WGMMA
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(shared_address(barrier)),
      "r"(parity)
      : "memory");
#else
  (void)barrier, (void)parity;
#endif
}
// TMA: the box of a tensor map (a __grid_constant__ kernel parameter) at the given coordinates
// (innermost first; out of the tensor: zeros) into shared memory, completing its bytes on `barrier`.
__device__ __forceinline__ void tma_load_2d(void* shared, const void* map, int c0, int c1, std::uint64_t* barrier) {
#if CNN_HAVE_WGMMA
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          shared_address(shared)),
      "l"(map), "r"(c0), "r"(c1), "r"(shared_address(barrier))
      : "memory");
#else
  (void)shared, (void)map, (void)c0, (void)c1, (void)barrier;
#endif
}
__device__ __forceinline__ void tma_load_4d(void* shared, const void* map, int c0, int c1, int c2, int c3,
                                            std::uint64_t* barrier) {
#if CNN_HAVE_WGMMA
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(shared_address(shared)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(shared_address(barrier))
      : "memory");
#else
  (void)shared, (void)map, (void)c0, (void)c1, (void)c2, (void)c3, (void)barrier;
#endif
}

// d[64 x N] += a[64 x k step] * b[k step x N], both K-major in shared memory (a k step is 16 bf16 or
// 8 tf32: 32 bytes), accumulating in fp32. Thread t of the warpgroup holds d[4j + h] at row
// 16 * (t / 32) + (t % 32) / 4 (+ 8 for h >= 2), column 8j + 2 * (t % 4) (+ 1 for odd h): per warp,
// mma.sync's m16n8 accumulators side by side (MmaWarpTile's acc). N is 32, 64 or 128.
template <Precision P, int N>
__device__ __forceinline__ void wgmma_async(float (&d)[N / 2], std::uint64_t a, std::uint64_t b);

// The accumulators' operand lists of N = 32, 64, 128.
#define CNN_WGMMA_D32_REGS "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define CNN_WGMMA_D64_REGS CNN_WGMMA_D32_REGS ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define CNN_WGMMA_D128_REGS \
  CNN_WGMMA_D64_REGS \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47" \
  ", %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define CNN_WGMMA_D32_OUTS \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), \
    "+f"(d[15])
#define CNN_WGMMA_D64_OUTS \
  CNN_WGMMA_D32_OUTS, \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), \
    "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), \
    "+f"(d[30]), "+f"(d[31])
#define CNN_WGMMA_D128_OUTS \
  CNN_WGMMA_D64_OUTS, \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), \
    "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), \
    "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), \
    "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), \
    "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// One specialization: the shape and types, the immediates after the scales (bf16: no transposes;
// tf32 takes none), and the operand numbers of a, b and the accumulate flag (after d's N / 2).
#if CNN_HAVE_WGMMA
#define CNN_WGMMA(PRECISION, N, SHAPE_TYPES, TAIL, A, B, SCALE)                                              \
  template <>                                                                                              \
  __device__ __forceinline__ void wgmma_async<Precision::PRECISION, N>(float(&d)[N / 2], std::uint64_t a,  \
                                                                      std::uint64_t b) {                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" SCALE ", 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned." SHAPE_TYPES " {" CNN_WGMMA_D##N##_REGS "}, %" A ", %" B    \
                 ", p, 1, 1" TAIL ";\n}\n"                                                                 \
                 : CNN_WGMMA_D##N##_OUTS                                                                   \
                 : "l"(a), "l"(b), "r"(1)                                                                  \
                 : "memory");                                                                              \
  }
#else
#define CNN_WGMMA(PRECISION, N, SHAPE_TYPES, TAIL, A, B, SCALE)                                              \
  template <>                                                                                              \
  __device__ __forceinline__ void wgmma_async<Precision::PRECISION, N>(float(&d)[N / 2], std::uint64_t a,  \
                                                                      std::uint64_t b) {                   \
    (void)d, (void)a, (void)b;                                                                             \
    __trap();                                                                                              \
  }
#endif
CNN_WGMMA(kBf16, 32, "m64n32k16.f32.bf16.bf16", ", 0, 0", "16", "17", "18")
CNN_WGMMA(kBf16, 64, "m64n64k16.f32.bf16.bf16", ", 0, 0", "32", "33", "34")
CNN_WGMMA(kBf16, 128, "m64n128k16.f32.bf16.bf16", ", 0, 0", "64", "65", "66")
CNN_WGMMA(kTf32, 32, "m64n32k8.f32.tf32.tf32", "", "16", "17", "18")
CNN_WGMMA(kTf32, 64, "m64n64k8.f32.tf32.tf32", "", "32", "33", "34")
CNN_WGMMA(kTf32, 128, "m64n128k8.f32.tf32.tf32", "", "64", "65", "66")
#undef CNN_WGMMA
#undef CNN_WGMMA_D32_REGS
#undef CNN_WGMMA_D64_REGS
#undef CNN_WGMMA_D128_REGS
#undef CNN_WGMMA_D32_OUTS
#undef CNN_WGMMA_D64_OUTS
#undef CNN_WGMMA_D128_OUTS

}  // namespace cnn::cuda
