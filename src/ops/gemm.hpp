// Small single-threaded float matrix products for the layer-by-layer convolutions (src/layers/conv.cpp),
// register-blocked over simd::Vec. Row-major; every sum runs in an order fixed by the sizes, so the
// same inputs give the same bits. (OpenBLAS was measured first: on this project's VMs it detects
// the vCPU as "Prescott" and runs its SSE3 kernel at 17 GFLOP/s; these run at docs/PERFORMANCE.md's
// figures without depending on CPU detection.) Private to src/.
#pragma once

#include <cstdint>

namespace cnn::gemm {

// C[m, n] = A[m, k] * B[k, n]            (accumulate: C += ...)
// (The weight gradient's C += A * B^T, as dot products along k with a horizontal sum and a scalar
// tail per output, ran at 28-37% of a core's peak where this form runs at 83-94%; the convolution
// now feeds it B^T instead: tools/gemm_bench.cpp, docs/PERFORMANCE.md.)
void nn(float* c, const float* a, const float* b, std::int64_t m, std::int64_t n, std::int64_t k, bool accumulate);

}  // namespace cnn::gemm
