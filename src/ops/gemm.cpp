#include "ops/gemm.hpp"

#include <algorithm>
#include <vector>

#include "ops/simd.hpp"

namespace cnn::gemm {

namespace {

using simd::kLanes;
using simd::Vec;

// Rows [i0, i0+R) x columns [j0, j0 + V*kLanes) of C = A*B: R*V accumulators stay in registers while
// k runs, each B load feeding R fused multiply-adds.
template <int R, int V>
inline void nn_block(float* c, const float* a, const float* b, std::int64_t n, std::int64_t k, std::int64_t i0,
                     std::int64_t j0, bool accumulate) {
  Vec acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = accumulate ? simd::load(c + (i0 + r) * n + j0 + v * kLanes) : Vec{};
  for (std::int64_t p = 0; p < k; ++p) {
    Vec bv[V];
    for (int v = 0; v < V; ++v) bv[v] = simd::load(b + p * n + j0 + v * kLanes);
    for (int r = 0; r < R; ++r) {
      const Vec av = simd::splat(a[(i0 + r) * k + p]);
      for (int v = 0; v < V; ++v) acc[r][v] += av * bv[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) simd::store(c + (i0 + r) * n + j0 + v * kLanes, acc[r][v]);
}

// Register tiles: kRows x kVectors accumulators plus kVectors B vectors and a broadcast fit the
// registers (32 with AVX-512: 6 x 4 = 24 accumulators; 16 with AVX2: 6 x 2 = 12), and each k step
// is kRows * kVectors FMAs for kVectors loads and kRows broadcasts.
constexpr int kRows = 6;
constexpr int kVectors = kLanes == 16 ? 4 : 2;

template <int V>
inline void nn_rows(float* c, const float* a, const float* b, std::int64_t m, std::int64_t n, std::int64_t k,
                    std::int64_t j0, bool accumulate) {
  std::int64_t i = 0;
  for (; i + kRows <= m; i += kRows) nn_block<kRows, V>(c, a, b, n, k, i, j0, accumulate);
  switch (m - i) {  // the last rows, in one tile
    case 1: nn_block<1, V>(c, a, b, n, k, i, j0, accumulate); break;
    case 2: nn_block<2, V>(c, a, b, n, k, i, j0, accumulate); break;
    case 3: nn_block<3, V>(c, a, b, n, k, i, j0, accumulate); break;
    case 4: nn_block<4, V>(c, a, b, n, k, i, j0, accumulate); break;
    case 5: nn_block<5, V>(c, a, b, n, k, i, j0, accumulate); break;
    default: break;
  }
}

}  // namespace

void nn(float* c, const float* a, const float* b, std::int64_t m, std::int64_t n, std::int64_t k, bool accumulate) {
  std::int64_t j = 0;
  for (; j + kVectors * kLanes <= n; j += kVectors * kLanes) nn_rows<kVectors>(c, a, b, m, n, k, j, accumulate);
  for (; j + kLanes <= n; j += kLanes) nn_rows<1>(c, a, b, m, n, k, j, accumulate);
  // The last columns, fewer than a vector (a conv's n is samples x output pixels, rarely a multiple
  // of the lanes): as one vector of columns, through copies padded with zeros, since a scalar loop
  // over them, with B read down its columns, cost as much as the vectors before it.
  const std::int64_t tail = n - j;
  if (tail == 0) return;
  thread_local std::vector<float> b_tail, c_tail;
  b_tail.assign(static_cast<std::size_t>(k * kLanes), 0.0f);
  c_tail.assign(static_cast<std::size_t>(m * kLanes), 0.0f);
  for (std::int64_t p = 0; p < k; ++p)
    std::copy(b + p * n + j, b + p * n + n, b_tail.begin() + p * kLanes);
  if (accumulate)
    for (std::int64_t i = 0; i < m; ++i) std::copy(c + i * n + j, c + i * n + n, c_tail.begin() + i * kLanes);
  nn_rows<1>(c_tail.data(), a, b_tail.data(), m, kLanes, k, 0, accumulate);
  for (std::int64_t i = 0; i < m; ++i)
    std::copy(c_tail.begin() + i * kLanes, c_tail.begin() + i * kLanes + tail, c + i * n + j);
}

}  // namespace cnn::gemm
