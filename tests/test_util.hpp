// Helpers shared by the test suites: synthetic data sets, relative errors, a one-rank communicator.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cnn/communicator.hpp"
#include "cnn/dataset.hpp"

namespace cnn::test {

// ||a - b|| / ||b|| in double; 0 when both are zero.
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  if (a.size() != b.size()) return INFINITY;
  if (norm == 0.0) return diff == 0.0 ? 0.0 : INFINITY;
  return std::sqrt(diff / norm);
}

// relative_error with b's norm floored at `floor`: for gradients that are zero but for rounding (the
// bias of a layer right before a bn layer, whose normalisation removes any shift per channel), the
// caller passes a small share of the whole gradient's norm.
inline double relative_error_floored(const std::vector<float>& a, const std::vector<float>& b, double floor) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  if (a.size() != b.size()) return INFINITY;
  return std::sqrt(diff) / std::max(std::sqrt(norm), floor);
}

inline double norm_of(const std::vector<float>& v) {
  double sum = 0.0;
  for (const float x : v) sum += static_cast<double>(x) * x;
  return std::sqrt(sum);
}

// Images of uniformly random pixels and labels, in the real uint8 layout.
inline Dataset random_dataset(std::int64_t count, TensorShape shape, std::uint32_t seed, int classes = 10) {
  Dataset data;
  data.name = "synthetic";
  data.shape = shape;
  data.classes = classes;
  std::mt19937 rng(seed);
  data.images.resize(static_cast<std::size_t>(count * shape.size()));
  data.labels.resize(static_cast<std::size_t>(count));
  for (auto& pixel : data.images) pixel = static_cast<std::uint8_t>(rng() & 0xff);
  for (auto& label : data.labels) label = static_cast<std::uint8_t>(rng() % static_cast<std::uint32_t>(classes));
  return data;
}

// A world of one (the reference that N-rank runs are compared with, computed inside each rank).
class LocalCommunicator : public SingleRankCommunicator {
 public:
  LocalCommunicator() : SingleRankCommunicator(MemorySpace::kHost) {}
};

inline std::vector<float> random_vector(std::size_t n, std::uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = uniform(rng);
  return v;
}

}  // namespace cnn::test
