// The PTX instructions under the tensor-core product (mma_gemm.cuh): each precision's rounding and
// mma.sync, ldmatrix .trans, and cp.async. Each needs sm_80; older architectures compile them to a
// trap (or to nothing, for the cp.async group bookkeeping), and the backend refuses tf32 and bf16
// there (cuda_backend.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cnn/choices.hpp"

namespace cnn::cuda {

// The rounding and the mma instruction of each tensor-core precision. mma.sync with tf32 and bf16
// needs sm_80; the backend refuses these precisions on older GPUs (cuda_backend.cu), and older
// architectures compile the kernel to a trap.
template <Precision P>
struct MmaFormat;

template <>
struct MmaFormat<Precision::kTf32> {
  static constexpr int kPerWord = 1;  // elements of k per shared-memory word
  static __device__ __forceinline__ std::uint32_t pack(float v, float /*unused*/) {
    std::uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
#else
    (void)v;
#endif
    return r;
  }
  // d += a[16x8] * b[8x8]: one k step of 8 words.
  static __device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d, (void)a, (void)b;
    __trap();
#endif
  }
};

template <>
struct MmaFormat<Precision::kBf16> {
  static constexpr int kPerWord = 2;
  // k in the low half, k+1 in the high half: the mma's register order.
  static __device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&pair);
  }
  // d += a[16x16] * b[16x8]: one k step of 8 words.
  static __device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d, (void)a, (void)b;
    __trap();
#endif
  }
};

// The shared-memory address of a generic pointer into shared memory, for ldmatrix and cp.async.
__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ldmatrix of 4 (2) 8x8 b16 matrices, rows addressed by lanes 0-31 (0-15). Without .trans, thread
// `lane` gets 32-bit word lane % 4 of row lane / 4 of each matrix, which is the mma fragment layout for
// 32-bit words of either format (a tf32 value, or a bf16 pair); with .trans, the matrices transposed
// (bf16 pairs across rows).
#define CNN_LDMATRIX(name, shape)                                                                    \
  __device__ __forceinline__ void name(std::uint32_t (&f)[4], unsigned address) {                  \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4" shape ".shared.b16 {%0,%1,%2,%3}, [%4];\n"         \
                 : "=r"(f[0]), "=r"(f[1]), "=r"(f[2]), "=r"(f[3])                                   \
                 : "r"(address));                                                                  \
  }
#define CNN_LDMATRIX_X2(name, shape)                                                                 \
  __device__ __forceinline__ void name(std::uint32_t (&f)[2], unsigned address) {                  \
    asm volatile("ldmatrix.sync.aligned.m8n8.x2" shape ".shared.b16 {%0,%1}, [%2];\n"               \
                 : "=r"(f[0]), "=r"(f[1])                                                          \
                 : "r"(address));                                                                  \
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
CNN_LDMATRIX(ldmatrix_x4, "")
CNN_LDMATRIX(ldmatrix_x4_trans, ".trans")
CNN_LDMATRIX_X2(ldmatrix_x2, "")
CNN_LDMATRIX_X2(ldmatrix_x2_trans, ".trans")
#else
template <int N>
__device__ __forceinline__ void ldmatrix_unavailable(std::uint32_t (&)[N], unsigned) { __trap(); }
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&f)[4], unsigned a) { ldmatrix_unavailable(f, a); }
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&f)[4], unsigned a) { ldmatrix_unavailable(f, a); }
__device__ __forceinline__ void ldmatrix_x2(std::uint32_t (&f)[2], unsigned a) { ldmatrix_unavailable(f, a); }
__device__ __forceinline__ void ldmatrix_x2_trans(std::uint32_t (&f)[2], unsigned a) { ldmatrix_unavailable(f, a); }
#endif
#undef CNN_LDMATRIX
#undef CNN_LDMATRIX_X2

// A chunk of zeros in global memory: the source of a cp.async whose chunk lies outside the operand
// (the copy reads 0 bytes from it and fills zeros, but its address must still be a global one).
namespace {
__device__ const uint4 kZeroChunk = {0, 0, 0, 0};
}

// cp.async of one 16-byte chunk from global to shared memory, through L1 (the implicit im2col reads
// each chunk for several taps: .cg, L2 only, made conv2's bf16 forward at batch 2048 29% slower on
// nvidia-h200, 200 against 155 us); src == nullptr
// writes zeros. The copies a thread issues between two commits form one group.
__device__ __forceinline__ void cp_async_chunk(void* shared, const uint4* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = shared_address(shared);
  const int bytes = src != nullptr ? 16 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src != nullptr ? src : &kZeroChunk),
               "r"(bytes)
               : "memory");
#else
  (void)shared, (void)src;
  __trap();
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most kPending of this thread's groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

}  // namespace cnn::cuda
