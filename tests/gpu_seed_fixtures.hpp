// The seed model's fixtures that the GPU test programs share (gpu_backend, gpu_persistent): the
// model at a filter count, random uint8 data sets, seeded initial parameters, a backend of either
// kind, and a device backend's gradient buffer read back.
#pragma once

#include <cuda_runtime.h>

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

}  // namespace cnn::gpu_test
