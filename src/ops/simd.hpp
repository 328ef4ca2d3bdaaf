// A short float vector for the CPU hot loops, through GCC/Clang vector extensions: one AVX-512
// register where the build targets it, one AVX2 register otherwise. Loads and stores go through
// memcpy, so they need no alignment.
#pragma once

#include <cstring>

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

inline Vec splat(float x) { return Vec{} + x; }

inline float sum(Vec v) {
  float total = 0.0f;
  for (int i = 0; i < kLanes; ++i) total += v[i];
  return total;
}

}  // namespace cnn::simd
