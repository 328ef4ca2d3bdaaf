// Dropout's masks: which elements a dropout:P layer keeps in a training step, as a pure function of
// (seed, global step, the sample's index in the global batch, the layer, the element's index in the
// sample). Nothing is stored or carried between steps, so the CPU backends and the GPU draw the same
// mask (the same integer arithmetic, host and device), any rank count draws the same one for a
// sample (a rank's slice keeps its samples' global indices), and a resumed run draws the masks the
// uninterrupted one did, bit for bit.
#pragma once

#include <cstdint>

#include "cnn/rng.hpp"

namespace cnn {

// Where a slice of a training step's samples stands: the step's key (stream_key of the seed, the
// dropout stream and the global step) and the index in the global batch of the slice's first sample.
struct MaskOrigin {
  std::uint64_t step_key = 0;
  std::int64_t first_sample = 0;
};

// What a dropout layer draws with: keep an element iff its 32 bits are >= threshold (P * 2^32,
// rounded down: P = 0 keeps everything), and scale a kept one by 1 / (1 - P) (inverted dropout, so
// evaluation, which keeps everything unscaled, sees the same expected activations).
struct DropoutDraw {
  std::uint32_t threshold = 0;
  float scale = 1.0f;
  std::uint32_t salt = 0;  // the layer's token index in the spec: two dropout layers draw apart
};

// The draw of a dropout layer of drop probability p (0 <= p < 1) at spec token `token`.
inline DropoutDraw dropout_draw(double p, int token) {
  DropoutDraw draw;
  draw.threshold = static_cast<std::uint32_t>(p * 4294967296.0);
  draw.scale = static_cast<float>(1.0 / (1.0 - p));
  draw.salt = static_cast<std::uint32_t>(token);
  return draw;
}

inline std::uint64_t dropout_step_key(std::uint64_t seed, std::int64_t global_step) {
  return stream_key(seed, Stream::kDropout, static_cast<std::uint64_t>(global_step));
}

// The 32 bits of element `element` of global-batch sample `sample` (both below 2^32).
CNN_HOST_DEVICE inline std::uint32_t dropout_bits(std::uint64_t step_key, std::uint32_t salt, std::uint64_t sample,
                                                  std::uint64_t element) {
  const std::uint64_t where = (sample << 32) | (element & 0xffffffffULL);
  return static_cast<std::uint32_t>(mix64(step_key + mix64(where ^ (0x9e3779b97f4a7c15ULL * (salt + 1ULL)))) >> 32);
}

// The factor of that element: 0 (dropped) or draw.scale (kept).
CNN_HOST_DEVICE inline float dropout_factor(const DropoutDraw& draw, std::uint64_t step_key, std::uint64_t sample,
                                            std::uint64_t element) {
  return dropout_bits(step_key, draw.salt, sample, element) >= draw.threshold ? draw.scale : 0.0f;
}

}  // namespace cnn
