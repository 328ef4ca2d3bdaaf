// What the GPU tests of the general network share (gpu_layers, gpu_layer_networks,
// gpu_layer_determinism): random data sets of any shape, a backend of either kind for a network and
// an op plan, the plans with nothing fused or with the seed model's layer ops, a few training steps
// kept for comparison (gradients, parameters, optimizer state, loss, evaluation and logits), and
// their comparison per parameter tensor. The uint8 data sets and download_grads are the seed model's
// (gpu_seed_fixtures.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "boost_test.hpp"
#include "cnn/backend.hpp"
#include "cnn/cuda_backend.hpp"
#include "cnn/lr_schedule.hpp"
#include "cnn/network.hpp"
#include "cnn/op_plan.hpp"
#include "cnn/optimizer.hpp"
#include "cnn/sampler.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "gpu_seed_fixtures.hpp"
#include "gpu_test_util.hpp"

namespace cnn::gpu_test {

inline RandomData random_data(cnn::TensorShape shape, std::int64_t train_count, std::int64_t test_count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  RandomData data;
  for (auto [set, count, name] : {std::tuple{&data.train, train_count, "random/train"},
                                  std::tuple{&data.test, test_count, "random/test"}}) {
    set->name = name;
    set->shape = shape;
    set->classes = 10;
    set->images = random_bytes(rng, static_cast<std::size_t>(count * shape.size()), 256);
    set->labels = random_bytes(rng, static_cast<std::size_t>(count), 10);
  }
  return data;
}

inline std::vector<float> initial_params(const cnn::Network& net, std::uint64_t seed) {
  std::vector<float> params(static_cast<std::size_t>(net.layout.total()));
  cnn::initialize_params(params.data(), net.layout, seed);
  return params;
}

// What a run trains with beyond the optimizer's kind (docs/TRAINING.md): the defaults train as before.
struct Regime {
  float weight_decay = 0.0f;
  bool nesterov = false;
  float label_smoothing = 0.0f;
  const cnn::LearningRate* lr = nullptr;  // the lr of each step; null: a fixed lr
};

// kind: "seq" or "cuda"; for cuda, `ops` (another plan of the network) or, when empty, the ops
// make_cuda_backend picks (plan_ops for FusionTarget::kCuda). graphs: BackendOptions::cuda_graphs.
inline std::unique_ptr<cnn::Backend> make(const std::string& kind, const cnn::Network& net,
                                          cnn::OptimizerKind optimizer, bool graphs = true,
                                          const std::vector<cnn::Op>& ops = {},
                                          cnn::Precision precision = cnn::Precision::kFp32,
                                          float label_smoothing = 0.0f) {
  cnn::BackendOptions options;
  options.precision = precision;
  options.label_smoothing = label_smoothing;
  options.kind = kind == "seq" ? cnn::BackendKind::kSeq : cnn::BackendKind::kCuda;
  options.optimizer = optimizer;
  options.cuda_graphs = graphs;
  if (kind == "seq") return cnn::make_backend(options, net);
  return ops.empty() ? cnn::make_cuda_backend(options, net) : cnn::make_cuda_backend(options, net, ops);
}

// The ops of `net` on the GPU with no fused op at all: every layer on its own, no ReLU folded
// (the reference plan, which `seq` runs).
inline std::vector<cnn::Op> unfused_ops(const cnn::Network& net) {
  return cnn::plan_ops(net, cnn::FusionTarget::kReference);
}

// The seed network on the GPU without its whole-model op: the fused conv_relu_pool, reading the data
// set itself as the first op of a cuda plan does, then fc and the loss on their own.
inline std::vector<cnn::Op> seed_layer_ops(const cnn::Network& net) {
  std::vector<cnn::Op> ops = cnn::plan_ops(net, cnn::FusionTarget::kCpu);
  BOOST_REQUIRE_EQUAL(cnn::describe_ops(ops), "conv_relu_pool fc softmax_cross_entropy");
  ops.front().reads_data = true;
  return ops;
}

// "ops A B C," as the backend's description lists them.
inline std::string ops_text(const std::vector<cnn::Op>& ops) { return "ops " + cnn::describe_ops(ops) + ","; }

struct Run {
  std::vector<float> grads;  // of the last step
  std::vector<float> params, state;
  cnn::BatchStats stats, eval;
  std::vector<float> logits;  // evaluate_logits over the test split (cnn_mpi predict)
  std::string description;
};

// `steps` steps of `batch` (the last one 13 samples smaller: a second batch size, a second graph),
// updating with `optimizer` between them; the gradients of the last step are kept.
inline Run train(const std::string& kind, const cnn::Network& net, const RandomData& data,
                 cnn::OptimizerKind optimizer, int steps, std::int64_t batch, bool graphs = true,
                 const std::vector<cnn::Op>& ops = {}, const Regime& regime = {}) {
  auto backend = make(kind, net, optimizer, graphs, ops, cnn::Precision::kFp32, regime.label_smoothing);
  backend->bind_data(data.train, data.test);
  backend->upload_params(initial_params(net, 5));
  backend->begin_epoch(cnn::Sampler(7, data.train.count()).permutation(0));
  cnn::OptimizerSettings settings;
  settings.kind = optimizer;
  const bool adam = optimizer == cnn::OptimizerKind::kAdam || optimizer == cnn::OptimizerKind::kAdamW;
  settings.lr = adam ? 1e-3f : 0.05f;
  settings.weight_decay = regime.weight_decay;
  settings.nesterov = regime.nesterov;
  Run run;
  std::int64_t first = 0;
  for (int step = 0; step < steps; ++step) {
    const std::int64_t count = step == steps - 1 && steps > 1 ? batch - 13 : batch;
    backend->set_step_randomness({11, step, 0});  // dropout's masks: step `step`, samples numbered from 0
    backend->compute_gradients(first, count);
    first += count;
    if (step == steps - 1) {
      backend->synchronize();
      std::vector<float> grads(static_cast<std::size_t>(net.layout.total()));
      if (backend->memory_space() == cnn::MemorySpace::kDevice)
        CNN_CHECK_CUDA(cudaMemcpy(grads.data(), backend->grads(), grads.size() * sizeof(float), cudaMemcpyDeviceToHost));
      else
        std::memcpy(grads.data(), backend->grads(), grads.size() * sizeof(float));
      run.grads = std::move(grads);
    }
    settings.step = step + 1;
    if (regime.lr != nullptr) settings.lr = regime.lr->at_float(step);  // a new lr at every step, as trainer.cpp
    backend->apply_update(settings, 1.0f / static_cast<float>(count));
  }
  run.stats = backend->take_train_stats();
  run.eval = backend->evaluate(0, data.test.count());
  run.logits.resize(static_cast<std::size_t>(data.test.count() * net.classes));
  const cnn::BatchStats with_logits = backend->evaluate_logits(0, data.test.count(), run.logits.data());
  BOOST_TEST(with_logits.loss_sum == run.eval.loss_sum);  // the same launches, the same bits
  BOOST_TEST(with_logits.correct == run.eval.correct);
  run.params = backend->download_params();
  run.state = backend->download_optimizer_state();
  run.description = backend->device_description();
  return run;
}

inline void check_against(const Run& got, const Run& want, const cnn::Network& net, double tolerance) {
  for (const cnn::ParamView& view : net.layout.views()) {
    const auto at = static_cast<std::size_t>(view.offset);
    const auto size = static_cast<std::size_t>(view.size);
    const double grad_err = relative_error(got.grads.data() + at, want.grads.data() + at, size);
    const double param_err = relative_error(got.params.data() + at, want.params.data() + at, size);
    std::printf("  %-14s grad %.2e  params %.2e\n", view.name().c_str(), grad_err, param_err);
    BOOST_TEST(grad_err <= tolerance, view.name() << " gradient: relative error " << grad_err);
    BOOST_TEST(param_err <= tolerance, view.name() << " parameters: relative error " << param_err);
  }
  const double loss_err = std::abs(got.stats.loss_sum - want.stats.loss_sum) / std::abs(want.stats.loss_sum);
  std::printf("  loss sums %.9g vs %.9g (%.2e), correct %lld vs %lld\n", got.stats.loss_sum, want.stats.loss_sum,
              loss_err, static_cast<long long>(got.stats.correct), static_cast<long long>(want.stats.correct));
  BOOST_TEST(loss_err <= tolerance);
  BOOST_TEST(got.stats.count == want.stats.count);
  BOOST_TEST(std::abs(got.eval.loss_sum - want.eval.loss_sum) <= tolerance * std::abs(want.eval.loss_sum));
  BOOST_TEST(got.eval.count == want.eval.count);
  const double logits_err = relative_error(got.logits.data(), want.logits.data(), want.logits.size());
  BOOST_TEST(logits_err <= tolerance, "test logits: relative error " << logits_err);
}

}  // namespace cnn::gpu_test
