// The seed model's fixtures that the GPU test programs share (gpu_backend*, gpu_persistent; the uint8
// data sets and download_grads also gpu_layer_runs.hpp): the model at a filter count, random uint8
// data sets, seeded initial parameters, a backend of either kind, a device backend's gradient buffer
// read back, and one step's gradient in float64 (the yardstick when float32 results differ by more
// than a tolerance).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/cuda_backend.hpp"
#include "cnn/dataset.hpp"
#include "cnn/model.hpp"
#include "cnn/network.hpp"
#include "gpu_test_util.hpp"

namespace cnn::gpu_test {

// A backend's gradient buffer, once its stream is done.
inline std::vector<float> download_grads(cnn::Backend& gpu, std::int64_t total) {
  std::vector<float> got(static_cast<std::size_t>(total));
  gpu.synchronize();
  CNN_CHECK_CUDA(cudaMemcpy(got.data(), gpu.grads(), got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return got;
}

inline cnn::SeedModel seed_model(int filters, int channels = 1, int side = 28) {
  cnn::SeedModel m;
  m.input = {channels, side, side};
  m.kernel = 3;
  m.filters = filters;
  m.classes = 10;
  return m;
}


struct RandomData {
  cnn::Dataset train, test;
};

inline RandomData random_dataset(const cnn::SeedModel& m, std::int64_t train_count, std::int64_t test_count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  RandomData data;
  for (auto [set, count, name] : {std::tuple{&data.train, train_count, "random/train"},
                                  std::tuple{&data.test, test_count, "random/test"}}) {
    set->name = name;
    set->shape = m.input;
    set->classes = m.classes;
    set->images = random_bytes(rng, static_cast<std::size_t>(count * m.input.size()), 256);
    set->labels = random_bytes(rng, static_cast<std::size_t>(count), m.classes);
  }
  return data;
}

inline std::vector<float> initial_params(const cnn::SeedModel& m, std::uint64_t seed) {
  const cnn::ParamLayout layout = m.layout();
  std::vector<float> params(static_cast<std::size_t>(layout.total()));
  cnn::initialize_params(params.data(), layout, seed);
  return params;
}

inline std::unique_ptr<cnn::Backend> make(const std::string& kind, const cnn::SeedModel& m,
                                   cnn::OptimizerKind optimizer = cnn::OptimizerKind::kSgd, bool graphs = true) {
  cnn::BackendOptions options;
  options.kind = cnn::parse_backend_kind(kind);
  options.optimizer = optimizer;
  options.cuda_graphs = graphs;
  const cnn::Network net = cnn::seed_network(m);
  return kind == "cuda" ? cnn::make_cuda_backend(options, net) : cnn::make_backend(options, net);
}

// One step in float64 on the host, the same mathematics as seq: the yardstick when the float32
// results of seq and cuda differ by more than the tolerance, to tell which of the two is off. (At a
// near-tie, float64 may take another argmax or ReLU branch than both float32 versions; its error
// then shows in both columns alike, as seen once at d=64, 1.16e-4 for cuda and seq while they agreed
// to 2e-7 with each other.)
inline std::vector<double> float64_gradients(const cnn::SeedModel& m, const std::vector<float>& params,
                                      const cnn::Dataset& train, const std::vector<std::int32_t>& order,
                                      std::int64_t first, std::int64_t count, double& loss_sum) {
  const cnn::ParamLayout layout = m.layout();
  const std::int64_t cw = layout.find("conv1.weight").offset, cb = layout.find("conv1.bias").offset;
  const std::int64_t fw = layout.find("fc.weight").offset, fb = layout.find("fc.bias").offset;
  const int C = m.input.channels, H = m.input.height, W = m.input.width, F = m.filters, O = m.classes;
  const int PH = m.pooled().height, PW = m.pooled().width, P = PH * PW;
  const std::int64_t K = m.fc_inputs();
  std::vector<double> grads(static_cast<std::size_t>(layout.total()), 0.0);
  std::vector<double> x(static_cast<std::size_t>(m.input.size())), pooled(static_cast<std::size_t>(K));
  std::vector<int> winner(static_cast<std::size_t>(K));
  loss_sum = 0.0;
  for (std::int64_t s = first; s < first + count; ++s) {
    const std::uint8_t* image = train.image(order[static_cast<std::size_t>(s)]);
    for (std::size_t q = 0; q < x.size(); ++q) x[q] = static_cast<float>(image[q]) * (1.0f / 255.0f);
    for (int f = 0; f < F; ++f)
      for (int cell = 0; cell < P; ++cell) {
        const int py = cell / PW, px = cell % PW;
        double best = 0.0;
        int win = 0;
        for (int ab = 0; ab < 4; ++ab) {
          double z = params[static_cast<std::size_t>(cb + f)];
          for (int c = 0; c < C; ++c)
            for (int i = 0; i < 3; ++i)
              for (int k = 0; k < 3; ++k)
                z += static_cast<double>(params[static_cast<std::size_t>(cw + ((f * C + c) * 3 + i) * 3 + k)]) *
                     x[static_cast<std::size_t>((c * H + 2 * py + ab / 2 + i) * W + 2 * px + ab % 2 + k)];
          if (ab == 0 || z > best) {
            best = z;
            win = ab;
          }
        }
        pooled[static_cast<std::size_t>(f * P + cell)] = std::max(best, 0.0);
        winner[static_cast<std::size_t>(f * P + cell)] = win;
      }
    std::vector<double> logits(static_cast<std::size_t>(O));
    for (int o = 0; o < O; ++o) {
      double z = params[static_cast<std::size_t>(fb + o)];
      for (std::int64_t j = 0; j < K; ++j) z += static_cast<double>(params[static_cast<std::size_t>(fw + o * K + j)]) * pooled[static_cast<std::size_t>(j)];
      logits[static_cast<std::size_t>(o)] = z;
    }
    const double top = *std::max_element(logits.begin(), logits.end());
    double denominator = 0.0;
    for (double z : logits) denominator += std::exp(z - top);
    const int label = train.labels[static_cast<std::size_t>(order[static_cast<std::size_t>(s)])];
    loss_sum += std::log(denominator) - (logits[static_cast<std::size_t>(label)] - top);
    std::vector<double> g(static_cast<std::size_t>(O));
    for (int o = 0; o < O; ++o)
      g[static_cast<std::size_t>(o)] = std::exp(logits[static_cast<std::size_t>(o)] - top) / denominator - (o == label ? 1.0 : 0.0);
    for (int o = 0; o < O; ++o) {
      grads[static_cast<std::size_t>(fb + o)] += g[static_cast<std::size_t>(o)];
      for (std::int64_t j = 0; j < K; ++j)
        grads[static_cast<std::size_t>(fw + o * K + j)] += g[static_cast<std::size_t>(o)] * pooled[static_cast<std::size_t>(j)];
    }
    for (int f = 0; f < F; ++f)
      for (int cell = 0; cell < P; ++cell) {
        const std::size_t j = static_cast<std::size_t>(f * P + cell);
        if (pooled[j] <= 0.0) continue;
        double gp = 0.0;
        for (int o = 0; o < O; ++o) gp += g[static_cast<std::size_t>(o)] * params[static_cast<std::size_t>(fw + o * K) + j];
        const int py = cell / PW, px = cell % PW, a = winner[j] / 2, b = winner[j] % 2;
        grads[static_cast<std::size_t>(cb + f)] += gp;
        for (int c = 0; c < C; ++c)
          for (int i = 0; i < 3; ++i)
            for (int k = 0; k < 3; ++k)
              grads[static_cast<std::size_t>(cw + ((f * C + c) * 3 + i) * 3 + k)] +=
                  gp * x[static_cast<std::size_t>((c * H + 2 * py + a + i) * W + 2 * px + b + k)];
      }
  }
  return grads;
}

inline double relative_error64(const float* got, const double* want, std::size_t n) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    norm += want[i] * want[i];
  }
  if (!std::isfinite(diff)) return INFINITY;
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

}  // namespace cnn::gpu_test
