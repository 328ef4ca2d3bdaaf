// Determinism of the cuda backend on layer networks: two identical runs (graphs), and graphs against
// eager steps, give identical bits; the overlapped step (per-layer ready points, a stream-ordered
// listener) gives the plain step's bits and reports its ranges in order, a residual block's one per
// inner conv (body last to first, then the shortcut).
// With no usable GPU it prints "SKIP: ..." and exits with 77, which CTest reports as skipped.
#define BOOST_TEST_MODULE gpu_layer_determinism
#include "boost_test.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/gradient_ready.hpp"
#include "cnn/network.hpp"
#include "cnn/optimizer.hpp"
#include "cnn/sampler.hpp"
#include "gpu_layer_runs.hpp"
#include "gpu_test_util.hpp"

namespace {

using namespace cnn::gpu_test;  // tests/gpu_test_util.hpp, gpu_layer_runs.hpp (download_grads: gpu_seed_fixtures.hpp)
using cnn::gpu_test::random_data;  // over glibc's struct random_data (stdlib.h)

struct RequireGpu {
  RequireGpu() { require_gpu(); }
};
BOOST_TEST_GLOBAL_FIXTURE(RequireGpu);

BOOST_AUTO_TEST_CASE(identical_runs_give_identical_bits) {
  const cnn::Network net = cnn::build_network("cifar", 32, {3, 32, 32}, 10);
  const RandomData data = random_data(net.input, 12 * 64, 100, 54);
  const Run a = train("cuda", net, data, cnn::OptimizerKind::kAdam, 12, 64);
  const Run b = train("cuda", net, data, cnn::OptimizerKind::kAdam, 12, 64);
  const Run eager = train("cuda", net, data, cnn::OptimizerKind::kAdam, 12, 64, false);
  BOOST_TEST(bitwise_equal(a.params, b.params), "two graph runs differ");
  BOOST_TEST(bitwise_equal(a.state, b.state), "two graph runs' adam state differs");
  BOOST_TEST(bitwise_equal(a.grads, b.grads));
  BOOST_TEST(bitwise_equal(a.params, eager.params), "graph and eager runs differ");
  BOOST_TEST(std::memcmp(&a.stats.loss_sum, &b.stats.loss_sum, sizeof(double)) == 0);
  BOOST_TEST(std::memcmp(&a.stats.loss_sum, &eager.stats.loss_sum, sizeof(double)) == 0);
  BOOST_TEST(!bitwise_equal(a.params, initial_params(net, 5)), "the parameters did not move");
}

// A one-rank listener that is stream-ordered, as NCCL is (so the overlapped step is captured with its
// calls), reducing early or not, and doing nothing else: it writes down what it is told.
class RecordingListener final : public cnn::GradientReadyListener {
 public:
  explicit RecordingListener(bool early) : early_(early) {}
  void gradients_ready(std::int64_t offset, std::int64_t count) override {
    calls += "R" + std::to_string(offset) + "+" + std::to_string(count) + " ";
  }
  void all_gradients_ready() override { calls += "E "; }
  bool reduces_early() const override { return early_; }
  bool stream_ordered() const override { return true; }
  std::string calls;

 private:
  bool early_;
};

// Every layer with parameters is a ready point of the overlapped step, in the order the backward
// finishes them (the last layer's first), together covering the gradient buffer. Reporting them (the
// main stream then waits for each weight gradient of the side stream) changes no bit of the step:
// eager, captured and replayed, for a listener that reduces early and one that does not. A listener
// that reduces early hears of every range but the last (all_gradients_ready covers it), in order.
BOOST_AUTO_TEST_CASE(overlapped_step_gives_the_plain_bits) {
  struct Case {
    const char* spec;
    cnn::TensorShape input;
    bool seed_layers;  // the seed model with seed_layer_ops instead of its whole-model op
  };
  for (const Case& c : {Case{"cifar", {3, 32, 32}, false},
                        Case{"conv3x3:8/s2/p1 relu conv4x4:6/p2 maxpool3/s2 relu conv1x1:5 relu flatten fc:16 relu "
                             "fc:10",
                             {3, 17, 15}, false},
                        Case{"seed", {1, 28, 28}, true}}) {
    const cnn::Network net = cnn::build_network(c.spec, 16, c.input, 10);
    const std::vector<cnn::Op> ops = c.seed_layers ? seed_layer_ops(net) : std::vector<cnn::Op>{};
    const std::int64_t total = net.layout.total();
    const RandomData data = random_data(net.input, 600, 50, 57);
    const auto permutation = cnn::Sampler(8, data.train.count()).permutation(0);
    // The layers with parameters, last first, and the calls an early listener expects.
    std::vector<const cnn::Layer*> param_layers;
    for (const cnn::Layer& layer : net.layers)
      if (layer.has_params()) param_layers.insert(param_layers.begin(), &layer);
    std::string expected;
    std::int64_t end = total;
    for (std::size_t i = 0; i < param_layers.size(); ++i) {
      const std::int64_t offset = param_layers[i]->weight_offset;
      if (i + 1 < param_layers.size()) expected += "R" + std::to_string(offset) + "+" + std::to_string(end - offset) + " ";
      end = offset;
    }
    expected += "E ";
    for (bool graphs : {true, false})
      for (bool early : {true, false})
        BOOST_TEST_CONTEXT(c.spec << (c.seed_layers ? " (layer ops)" : "") << ", graphs " << graphs << ", listener "
                                  << (early ? "reduces early" : "reduces at the end")) {
          auto gpu = make("cuda", net, cnn::OptimizerKind::kSgd, graphs, ops);
          gpu->bind_data(data.train, data.test);
          gpu->upload_params(initial_params(net, 5));
          gpu->begin_epoch(permutation);
          for (std::int64_t count : {std::int64_t{64}, std::int64_t{200}, std::int64_t{17}}) {
            BOOST_TEST_CONTEXT("count=" << count) {
              gpu->compute_gradients(7, count);
              const std::vector<float> plain = download_grads(*gpu, total);
              const cnn::BatchStats plain_stats = gpu->take_train_stats();
              RecordingListener listener(early);
              for (int step = 0; step < 3; ++step) {  // eager, then (graphs) captured and replayed
                listener.calls.clear();
                gpu->compute_gradients_overlapped(7, count, listener);
                BOOST_TEST(bitwise_equal(download_grads(*gpu, total), plain), "step " << step);
                const cnn::BatchStats stats = gpu->take_train_stats();
                BOOST_TEST(std::memcmp(&stats.loss_sum, &plain_stats.loss_sum, sizeof(double)) == 0);
                BOOST_TEST(stats.correct == plain_stats.correct);
                // A replayed graph calls nothing, so only the calls of a queued step are checked.
                if (!graphs) BOOST_TEST(listener.calls == (early ? expected : std::string("E ")), listener.calls);
              }
            }
          }
          const std::vector<cnn::GradientReadyPoint> points = gpu->gradient_ready_points();
          BOOST_REQUIRE_EQUAL(points.size(), param_layers.size());
          std::int64_t covered_from = total;
          for (std::size_t i = 0; i < points.size(); ++i) {
            BOOST_TEST(points[i].offset == param_layers[i]->weight_offset);
            BOOST_TEST(points[i].offset + points[i].count == covered_from);
            covered_from = points[i].offset;
          }
          BOOST_TEST(covered_from == 0);
          // Measured by the eager steps that reported the points; the last point has no compute after it.
          if (early) BOOST_TEST(points.front().seconds_after > 0.0);
          BOOST_TEST(points.back().seconds_after == 0.0);
        }
  }
}

// A residual network's overlapped step: a block reports one range per inner conv, in the order its
// backward finishes them (its body from the last conv, then its shortcut), so the ranges are not in
// buffer order; together with the others they still cover the buffer once. Reporting them changes no
// bit of the step, eager or captured.
BOOST_AUTO_TEST_CASE(overlapped_residual_step_gives_the_plain_bits) {
  // conv1, then the block: body conv2 (stride 2) and conv3, shortcut conv4 (1x1, stride 2); then fc.
  const cnn::Network net = cnn::build_network("conv3x3:8/p1 relu res[conv3x3:8/s2/p1 relu conv3x3:8/p1] relu fc:10", 0,
                                              {3, 16, 16}, 10);
  const std::int64_t total = net.layout.total();
  const auto range_of = [&](const std::string& layer) {
    const cnn::ParamView& weight = net.layout.find(layer + ".weight");
    const cnn::ParamView& bias = net.layout.find(layer + ".bias");
    return cnn::GradientReadyPoint{weight.offset, bias.offset + bias.size - weight.offset, 0.0};
  };
  const std::vector<std::string> order = {"fc", "conv3", "conv2", "conv4", "conv1"};
  std::string expected;
  for (std::size_t i = 0; i + 1 < order.size(); ++i) {
    const cnn::GradientReadyPoint r = range_of(order[i]);
    expected += "R" + std::to_string(r.offset) + "+" + std::to_string(r.count) + " ";
  }
  expected += "E ";
  const RandomData data = random_data(net.input, 400, 50, 58);
  const auto permutation = cnn::Sampler(8, data.train.count()).permutation(0);
  for (bool graphs : {true, false})
    for (bool early : {true, false})
      BOOST_TEST_CONTEXT("graphs " << graphs << ", listener " << (early ? "reduces early" : "reduces at the end")) {
        auto gpu = make("cuda", net, cnn::OptimizerKind::kSgd, graphs);
        gpu->bind_data(data.train, data.test);
        gpu->upload_params(initial_params(net, 5));
        gpu->begin_epoch(permutation);
        for (std::int64_t count : {std::int64_t{64}, std::int64_t{17}}) {
          BOOST_TEST_CONTEXT("count=" << count) {
            gpu->compute_gradients(7, count);
            const std::vector<float> plain = download_grads(*gpu, total);
            const cnn::BatchStats plain_stats = gpu->take_train_stats();
            RecordingListener listener(early);
            for (int step = 0; step < 3; ++step) {
              listener.calls.clear();
              gpu->compute_gradients_overlapped(7, count, listener);
              BOOST_TEST(bitwise_equal(download_grads(*gpu, total), plain), "step " << step);
              const cnn::BatchStats stats = gpu->take_train_stats();
              BOOST_TEST(std::memcmp(&stats.loss_sum, &plain_stats.loss_sum, sizeof(double)) == 0);
              if (!graphs) BOOST_TEST(listener.calls == (early ? expected : std::string("E ")), listener.calls);
            }
          }
        }
        const std::vector<cnn::GradientReadyPoint> points = gpu->gradient_ready_points();
        BOOST_REQUIRE_EQUAL(points.size(), order.size());
        std::int64_t covered = 0;
        for (std::size_t i = 0; i < points.size(); ++i) {
          BOOST_TEST(points[i].offset == range_of(order[i]).offset, order[i]);
          BOOST_TEST(points[i].count == range_of(order[i]).count, order[i]);
          covered += points[i].count;
        }
        BOOST_TEST(covered == total);
      }
}

}  // namespace
