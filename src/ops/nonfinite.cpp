#include "cnn/nonfinite.hpp"

#include <cstring>

namespace cnn {

namespace {

// NaN and the infinities are exactly the floats whose exponent bits are all ones.
constexpr std::uint32_t kExponentMask = 0x7f800000u;

inline bool nonfinite_bits(const float* value) {
  std::uint32_t bits;
  std::memcpy(&bits, value, sizeof(bits));
  return (bits & kExponentMask) == kExponentMask;
}

}  // namespace

std::int64_t first_nonfinite(const float* data, std::int64_t count) {
  // An integer OR over a block vectorises (a float test with early exit would not); only a block that
  // holds a non-finite value is searched element by element.
  constexpr std::int64_t kBlock = 4096;
  for (std::int64_t begin = 0; begin < count; begin += kBlock) {
    const std::int64_t end = begin + kBlock < count ? begin + kBlock : count;
    std::uint32_t any = 0;
    for (std::int64_t i = begin; i < end; ++i) any |= nonfinite_bits(data + i) ? 1u : 0u;
    if (any == 0) continue;
    for (std::int64_t i = begin; i < end; ++i)
      if (nonfinite_bits(data + i)) return i;
  }
  return -1;
}

}  // namespace cnn
