// A short float vector for the CPU hot loops, through GCC/Clang vector extensions: one AVX-512
// register where the build targets it, one AVX2 register otherwise. Loads and stores go through
// memcpy, so they need no alignment.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

namespace cnn::simd {

#ifdef __AVX512F__
inline constexpr int kLanes = 16;
#else
inline constexpr int kLanes = 8;
#endif

typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void store(float* p, Vec v) { std::memcpy(p, &v, sizeof(v)); }

// x - 0 is x for every x, -0 included, so GCC folds it to a bare broadcast (0 + x is +0 for x = -0,
// so it cannot: it kept a scalar add before each broadcast).
inline Vec splat(float x) { return x - Vec{}; }

// Makes v a register value from here on: GCC otherwise folds a vector used by several FMAs into each
// of them as a memory operand, one load per use, and on this project's AVX-512 machine (AMD Zen 5)
// loads, not FMAs, then set the pace.
inline void in_register(Vec& v) { asm("" : "+v"(v)); }

typedef std::int32_t IVec __attribute__((vector_size(kLanes * sizeof(std::int32_t))));
typedef std::uint8_t ByteVec __attribute__((vector_size(kLanes)));

// One step of transpose(): the off-diagonal d x d blocks of every 2d x 2d block swap, one two-input
// shuffle per row. __builtin_shufflevector (GCC 12 and clang) takes constant lane indices: lane l of
// the pair (a, b), b's lanes numbered from kLanes.
template <int d, int... L>
inline Vec low_half(Vec a, Vec b, std::integer_sequence<int, L...>) {
  return __builtin_shufflevector(a, b, ((L & d) ? kLanes + L - d : L)...);
}
template <int d, int... L>
inline Vec high_half(Vec a, Vec b, std::integer_sequence<int, L...>) {
  return __builtin_shufflevector(a, b, ((L & d) ? kLanes + L : L + d)...);
}

template <int d>
inline void transpose_blocks(Vec* rows) {
  constexpr auto lanes = std::make_integer_sequence<int, kLanes>{};
  for (int i = 0; i < kLanes; ++i) {
    if (i & d) continue;
    const Vec a = rows[i], b = rows[i + d];
    rows[i] = low_half<d>(a, b, lanes);
    rows[i + d] = high_half<d>(a, b, lanes);
  }
  if constexpr (d > 1) transpose_blocks<d / 2>(rows);
}

// Transposes the kLanes x kLanes matrix whose rows are rows[0..kLanes), in registers:
// kLanes * log2(kLanes) shuffles, against two scalar moves per element.
inline void transpose(Vec* rows) { transpose_blocks<kLanes / 2>(rows); }

inline float sum(Vec v) {
  float total = 0.0f;
  for (int i = 0; i < kLanes; ++i) total += v[i];
  return total;
}

}  // namespace cnn::simd
