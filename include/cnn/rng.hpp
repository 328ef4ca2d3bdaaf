// A counter-based generator: the n-th number of stream `key` is a pure function of (key, n).
// Nothing is carried from one draw to the next, so any rank can compute any draw alone, and the
// sampler and the initialisation are reproducible from (seed, epoch) without saved RNG state.
#pragma once

#include <cstdint>

// Host and device alike: the dropout kernels draw their masks with mix64 (dropout_mask.hpp).
#ifdef __CUDACC__
#define CNN_HOST_DEVICE __host__ __device__
#else
#define CNN_HOST_DEVICE
#endif

namespace cnn {

// The 64-bit finaliser of MurmurHash3 (also SplitMix64's output mix): a bijection with full avalanche.
CNN_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// Distinct purposes (sampling, initialisation) get independent streams from one user seed.
enum class Stream : std::uint64_t { kSampler = 1, kInit = 2, kDropout = 3 };

inline std::uint64_t stream_key(std::uint64_t seed, Stream stream, std::uint64_t sub) {
  return mix64(mix64(seed ^ 0x9e3779b97f4a7c15ULL) + mix64(static_cast<std::uint64_t>(stream)) * 3 +
               mix64(sub + 0x632be59bd9b4e019ULL));
}

inline std::uint64_t draw_u64(std::uint64_t key, std::uint64_t counter) {
  return mix64(key + mix64(counter + 0xbf58476d1ce4e5b9ULL));
}

// Uniform in [0, 1) with 24 random bits, exactly representable as float.
inline float draw_unit_float(std::uint64_t key, std::uint64_t counter) {
  return static_cast<float>(draw_u64(key, counter) >> 40) * (1.0f / 16777216.0f);
}

// Uniform integer in [0, bound) by the multiply-high method (bias below 2^-32 for bound < 2^32).
__extension__ typedef unsigned __int128 uint128_t;  // GCC/Clang builtin; __extension__ keeps -Wpedantic quiet

inline std::uint64_t draw_below(std::uint64_t key, std::uint64_t counter, std::uint64_t bound) {
  return static_cast<std::uint64_t>((static_cast<uint128_t>(draw_u64(key, counter)) * bound) >> 64);
}

}  // namespace cnn
