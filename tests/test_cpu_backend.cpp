// The CPU backend on every kind of network (src/cpu/cpu_backend.cpp, src/cpu/cpu_op_runner.cpp):
//   1. the overlapped step gives the plain step's bits, reports one ready point per layer with
//      parameters from the last layer down, each range already final when reported, and lets MPI
//      progress only once something may be reducing;
//   2. `threads` with its fused ops (the CPU plan) agrees with `seq` (the reference plan, nothing
//      fused) to the design's 1e-5 on loss, every gradient and evaluation: the seed, cifar, a network
//      whose conv_relu_pool is the first of several convs, and one where it stands after a pool;
//   3. both on residual networks (res[...]): identity and projection blocks, a block after a ReLU, a
//      block first, bodies that start with a ReLU or hold a max-pool, and blocks that pass no
//      gradient back whose body starts with a layer without parameters.
#define BOOST_TEST_MODULE cpu_backend
#include <algorithm>
#include <string>
#include <vector>

#include "boost_test.hpp"
#include "cnn/cpu_backend.hpp"
#include "cnn/network.hpp"
#include "cnn/sampler.hpp"
#include "test_util.hpp"

namespace {

struct Case {
  std::string model;
  cnn::TensorShape input;
  int filters = 8;
};

// Small shapes, so that every backend kind runs in well under a second.
const std::vector<Case> kNetworks = {
    {"seed", {1, 28, 28}, 8},
    {"cifar", {3, 20, 20}},  // 18 -> 9 -> 7 -> 3 -> 1: every layer of the preset, small
    {"conv3x3:6 relu maxpool2 conv3x3:8 relu maxpool2 conv3x3:8 relu fc:10", {3, 20, 20}},
    {"maxpool2 conv3x3:6 relu maxpool2 fc:12 relu fc:10", {1, 28, 28}},  // conv_relu_pool after a pool
};

// Residual blocks (src/layers/residual.cpp): one op each, with parameters inside (one ready point per
// block, its span), and a body whose ops the block runs over buffers of its own.
const std::vector<Case> kResidualNetworks = {
    // An identity block right after a ReLU.
    {"conv3x3:6/p1 relu res[conv3x3:6/p1 relu conv3x3:6/p1] relu maxpool2 fc:10", {3, 20, 20}},
    // A projection block (stride 2), then one with a max-pool in its body (its winners are the block's
    // own data, kept per micro-batch slot by the overlapped step): 20 -> 10 -> 5.
    {"conv3x3:6/p1 relu res[conv3x3:8/s2/p1 relu conv3x3:8/p1] relu res[conv3x3:8/p1 relu maxpool2] fc:10",
     {3, 20, 20}},
    // A block as the first layer: no input gradient out of its body or its shortcut.
    {"res[conv3x3:6/s2/p1 relu conv3x3:6/p1] relu maxpool2 fc:10", {1, 28, 28}},
    // A body that starts with a ReLU, after a conv with no ReLU of its own (its input has negatives).
    {"conv3x3:6/p1 res[relu conv3x3:6/p1 relu conv3x3:6/p1] maxpool2 fc:10", {3, 20, 20}},
    // A block without parameters, then the fused conv_relu_pool (nothing with parameters before it),
    // then an identity block.
    {"res[relu] conv3x3:6 relu maxpool2 res[conv3x3:6/p1] relu fc:10", {3, 20, 20}},
};

// Networks with bn layers (src/layers/bn.cpp): each thread runs its share as one micro-batch, the
// statistics summed over the whole slice (SliceSums), so `threads` computes what `seq` computes.
const std::vector<Case> kBatchNormNetworks = {
    // After convs, inside an identity block, after a fc layer (per feature).
    {"conv3x3:6/p1 bn relu maxpool2 res[conv3x3:6/p1 bn relu conv3x3:6/p1 bn] relu fc:16 bn relu fc:10", {3, 20, 20}},
    // bn first (no input gradient), before the fused conv_relu_pool, and first in a projection block.
    {"bn conv3x3:6 relu maxpool2 res[bn conv3x3:8/s2/p1] fc:10", {1, 28, 28}},
};

// Blocks that pass no gradient back (nothing with parameters before them) whose body starts with a
// layer without parameters: the body's backward must stop at its first conv, as the network's does
// (the ReLU or max-pool below it has no gradient to pass, and none is wanted).
const std::vector<Case> kNoGradientBlocks = {
    {"res[relu conv3x3:3/p1] relu conv3x3:6 relu maxpool2 fc:10", {3, 20, 20}},  // first, identity
    {"maxpool2 res[relu conv3x3:6/p1 relu conv3x3:6/p1] fc:10", {3, 20, 20}},    // after a pool: projection
    {"res[maxpool2 conv3x3:6/p1] relu fc:10", {1, 28, 28}},                      // a max-pool first in the body
};

cnn::Network network_of(const Case& c) { return cnn::build_network(c.model, c.filters, c.input, 10); }

std::unique_ptr<cnn::Backend> backend_of(const cnn::Network& net, cnn::BackendKind kind, int threads) {
  cnn::BackendOptions options;
  options.kind = kind;
  options.threads = threads;
  return cnn::make_cpu_backend(net, options);
}

std::vector<float> params_of(const cnn::Network& net, std::uint64_t seed) {
  std::vector<float> params(static_cast<std::size_t>(net.layout.total()));
  cnn::initialize_params(params.data(), net.layout, seed);
  return params;
}

// Writes down what the backend tells: each ready range with a copy of its gradients at that moment,
// the progress calls before and after the first ready point, and the final call.
class RecordingListener : public cnn::GradientReadyListener {
 public:
  explicit RecordingListener(const float* grads) : grads_(grads) {}
  void gradients_ready(std::int64_t offset, std::int64_t count) override {
    BOOST_TEST(!all_ready);
    ranges.push_back({offset, count, 0.0});
    snapshots.emplace_back(grads_ + offset, grads_ + offset + count);
  }
  void all_gradients_ready() override {
    BOOST_TEST(!all_ready);
    all_ready = true;
  }
  void make_progress() override { (ranges.empty() ? progress_before_ready : progress_after_ready) += 1; }

  const float* grads_;
  std::vector<cnn::GradientReadyPoint> ranges;
  std::vector<std::vector<float>> snapshots;
  int progress_before_ready = 0, progress_after_ready = 0;
  bool all_ready = false;
};

struct Step {
  std::vector<float> grads;
  cnn::BatchStats stats;
};

Step take_step(cnn::Backend& backend, const cnn::Network& net, std::int64_t first, std::int64_t count,
               RecordingListener* listener) {
  if (listener != nullptr) backend.compute_gradients_overlapped(first, count, *listener);
  else backend.compute_gradients(first, count);
  return {std::vector<float>(backend.grads(), backend.grads() + net.layout.total()), backend.take_train_stats()};
}

std::int64_t layers_with_params(const cnn::Network& net) {
  return std::count_if(net.layers.begin(), net.layers.end(), [](const cnn::Layer& l) { return l.has_params(); });
}

// The overlapped step against the plain one on `seq` and `threads`, several batches (test 1).
void check_overlapped_step(const Case& c, const cnn::Dataset& data, const cnn::Dataset& colour) {
  const cnn::Network net = network_of(c);
  const cnn::Dataset& train = c.input.channels == 3 ? colour : data;
  const std::vector<float> params = params_of(net, 5);
  const std::vector<std::int32_t> order = cnn::Sampler(3, train.count()).permutation(0);
  for (const auto& [kind, threads] : {std::pair{cnn::BackendKind::kSeq, 1}, {cnn::BackendKind::kThreads, 2},
                                      {cnn::BackendKind::kThreads, 3}}) {
    // 150: several micro-batches per thread; 37: a short one; 5: threads with nothing or one sample.
    for (const auto& [first, count] : {std::pair<std::int64_t, std::int64_t>{0, 150}, {150, 37}, {3, 5}}) {
      BOOST_TEST_CONTEXT(c.model << " " << cnn::backend_kind_name(kind) << " x" << threads << " batch " << first
                                 << "+" << count) {
        auto backend = backend_of(net, kind, threads);
        backend->bind_data(train, train);
        backend->upload_params(params);
        backend->begin_epoch(order);
        // Twice overlapped, then plain: kept buffers are reused and do not disturb the plain step.
        for (int round = 0; round < 2; ++round) {
          RecordingListener listener(backend->grads());
          const Step overlapped = take_step(*backend, net, first, count, &listener);
          const Step plain = take_step(*backend, net, first, count, nullptr);
          BOOST_TEST((overlapped.grads == plain.grads));
          BOOST_TEST(overlapped.stats.loss_sum == plain.stats.loss_sum);
          BOOST_TEST(overlapped.stats.correct == plain.stats.correct);
          BOOST_TEST(overlapped.stats.count == count);
          BOOST_TEST(listener.all_ready);
          // One ready range per layer with parameters, from the last layer down, covering the
          // buffer; each held its final sums when it was reported.
          BOOST_TEST_REQUIRE(static_cast<std::int64_t>(listener.ranges.size()) == layers_with_params(net));
          std::int64_t end = net.layout.total();
          for (std::size_t r = 0; r < listener.ranges.size(); ++r) {
            const cnn::GradientReadyPoint range = listener.ranges[r];
            BOOST_TEST(range.offset + range.count == end);
            end = range.offset;
            const std::vector<float> final_sums(plain.grads.begin() + range.offset,
                                                plain.grads.begin() + range.offset + range.count);
            BOOST_TEST((listener.snapshots[r] == final_sums), "range " << r << " changed after it was reported");
          }
          BOOST_TEST(end == 0);
          BOOST_TEST(listener.progress_before_ready == 0);  // nothing can be reducing yet
          if (count >= 2 * threads) BOOST_TEST(listener.progress_after_ready > 0);
          // The points the planner reads name the same ranges, with measured times after them.
          const std::vector<cnn::GradientReadyPoint> points = backend->gradient_ready_points();
          BOOST_TEST_REQUIRE(points.size() == listener.ranges.size());
          for (std::size_t p = 0; p < points.size(); ++p) {
            BOOST_TEST(points[p].offset == listener.ranges[p].offset);
            BOOST_TEST(points[p].count == listener.ranges[p].count);
            BOOST_TEST(points[p].seconds_after >= 0.0);
            if (p > 0) BOOST_TEST(points[p].seconds_after <= points[p - 1].seconds_after);
          }
          if (count >= 100) BOOST_TEST(points.front().seconds_after > 0.0);
        }
      }
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(overlapped_step_gives_the_plain_steps_bits_and_final_ranges) {
  const cnn::Dataset data = cnn::test::random_dataset(200, {1, 28, 28}, 31);
  const cnn::Dataset colour = cnn::test::random_dataset(200, {3, 20, 20}, 32);
  for (const Case& c : kNetworks) check_overlapped_step(c, data, colour);
}

BOOST_AUTO_TEST_CASE(overlapped_step_of_residual_networks) {
  const cnn::Dataset data = cnn::test::random_dataset(200, {1, 28, 28}, 33);
  const cnn::Dataset colour = cnn::test::random_dataset(200, {3, 20, 20}, 34);
  for (const Case& c : kResidualNetworks) check_overlapped_step(c, data, colour);
}

BOOST_AUTO_TEST_CASE(overlapped_step_of_batch_norm_networks) {
  const cnn::Dataset data = cnn::test::random_dataset(200, {1, 28, 28}, 35);
  const cnn::Dataset colour = cnn::test::random_dataset(200, {3, 20, 20}, 36);
  for (const Case& c : kBatchNormNetworks) check_overlapped_step(c, data, colour);
}

BOOST_AUTO_TEST_CASE(ready_points_are_known_before_the_first_step) {
  const cnn::Network cifar = cnn::build_network("cifar", 0, {3, 32, 32}, 10);
  const std::vector<cnn::GradientReadyPoint> points = backend_of(cifar, cnn::BackendKind::kThreads, 2)->gradient_ready_points();
  // fc2, fc1, conv3, conv2, conv1: each layer's weight and bias, no time measured yet.
  const std::vector<std::string> layers = {"fc2", "fc1", "conv3", "conv2", "conv1"};
  BOOST_TEST_REQUIRE(points.size() == layers.size());
  for (std::size_t p = 0; p < points.size(); ++p) {
    const cnn::ParamView& weight = cifar.layout.find(layers[p] + ".weight");
    const cnn::ParamView& bias = cifar.layout.find(layers[p] + ".bias");
    BOOST_TEST(points[p].offset == weight.offset);
    BOOST_TEST(points[p].count == weight.size + bias.size);
    BOOST_TEST(points[p].seconds_after == 0.0);
  }
}

namespace {

// `threads` (the CPU plan, with conv_relu_pool where it fits when expect_fused) against `seq` (the
// reference plan): one step's loss and every gradient, and evaluation, to 1e-5.
void check_threads_against_seq(const Case& c, const cnn::Dataset& data, bool expect_fused) {
  const cnn::Network net = network_of(c);
  const std::vector<float> params = params_of(net, 7);
  const std::vector<std::int32_t> order = cnn::Sampler(9, data.count()).permutation(1);
  auto seq = backend_of(net, cnn::BackendKind::kSeq, 4);  // `seq` is one thread whatever it is asked
  BOOST_TEST(seq->device_description().rfind("1 CPU thread, ops ", 0) == 0, seq->device_description());
  BOOST_TEST(seq->device_description().find("conv_relu_pool") == std::string::npos, seq->device_description());
  seq->bind_data(data, data);
  seq->upload_params(params);
  seq->begin_epoch(order);
  const Step reference = take_step(*seq, net, 10, 100, nullptr);
  const cnn::BatchStats reference_eval = seq->evaluate(0, data.count());
  for (int threads : {1, 3}) {
    BOOST_TEST_CONTEXT(c.model << ", threads x" << threads) {
      auto fused = backend_of(net, cnn::BackendKind::kThreads, threads);
      if (expect_fused)
        BOOST_TEST(fused->device_description().find(" conv_relu_pool ") != std::string::npos, fused->device_description());
      fused->bind_data(data, data);
      fused->upload_params(params);
      fused->begin_epoch(order);
      const Step step = take_step(*fused, net, 10, 100, nullptr);
      BOOST_TEST(step.stats.count == reference.stats.count);
      BOOST_TEST(step.stats.correct == reference.stats.correct);
      BOOST_TEST(std::fabs(step.stats.loss_sum - reference.stats.loss_sum) <= 1e-5 * reference.stats.loss_sum);
      for (const cnn::ParamView& view : net.layout.views()) {
        const std::vector<float> a(step.grads.begin() + view.offset, step.grads.begin() + view.offset + view.size);
        const std::vector<float> b(reference.grads.begin() + view.offset,
                                   reference.grads.begin() + view.offset + view.size);
        // A bias right before a bn layer has gradient 0 but for rounding: its error is relative to a
        // hundredth of the whole gradient.
        const double error = cnn::test::relative_error_floored(a, b, 1e-2 * cnn::test::norm_of(reference.grads));
        BOOST_TEST(error <= 1e-5, view.name() << ": relative error " << error);
      }
      const cnn::BatchStats eval = fused->evaluate(0, data.count());
      BOOST_TEST(eval.correct == reference_eval.correct);
      BOOST_TEST(std::fabs(eval.loss_sum - reference_eval.loss_sum) <= 1e-5 * reference_eval.loss_sum);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(fused_ops_agree_with_the_reference_plan) {
  const cnn::Dataset grey = cnn::test::random_dataset(120, {1, 28, 28}, 41);
  const cnn::Dataset colour = cnn::test::random_dataset(120, {3, 32, 32}, 42);
  const std::vector<Case> networks = {
      {"seed", {1, 28, 28}, 16},
      {"cifar", {3, 32, 32}},
      {"conv3x3:8 relu maxpool2 conv3x3:8 relu maxpool2 conv3x3:8 relu fc:10", {3, 32, 32}},
      // A 4x4 kernel: an odd conv output (25), whose last row and column no pool cell reads.
      {"conv4x4:6 relu maxpool2 conv3x3:8 relu maxpool2 fc:16 relu fc:10", {1, 28, 28}},
      {"maxpool2 conv3x3:6 relu maxpool2 fc:12 relu fc:10", {1, 28, 28}},
      // conv_relu_pool, then a projection block and an identity block.
      {"conv3x3:6 relu maxpool2 res[conv3x3:8/s2/p1 relu conv3x3:8/p1] relu res[conv3x3:8/p1 relu conv3x3:8/p1] relu "
       "fc:10",
       {1, 28, 28}},
  };
  for (const Case& c : networks) check_threads_against_seq(c, c.input.channels == 3 ? colour : grey, true);
}

// Residual networks with no fused op: `threads` splits the batch into micro-batches over threads (the
// blocks' inner buffers per thread), `seq` runs it whole on one.
BOOST_AUTO_TEST_CASE(residual_networks_agree_with_seq) {
  const cnn::Dataset grey = cnn::test::random_dataset(120, {1, 28, 28}, 44);
  const cnn::Dataset colour = cnn::test::random_dataset(120, {3, 20, 20}, 45);
  for (const Case& c : kResidualNetworks) check_threads_against_seq(c, c.input.channels == 3 ? colour : grey, false);
}

// bn: gradients and loss as `seq`'s on every thread count (check_threads_against_seq), and the running
// statistics after two steps too, and evaluation with them: a batch of 5 on 7 threads leaves two
// threads without samples (they take no part in the sums).
BOOST_AUTO_TEST_CASE(batch_norm_networks_agree_with_seq) {
  const cnn::Dataset grey = cnn::test::random_dataset(120, {1, 28, 28}, 46);
  const cnn::Dataset colour = cnn::test::random_dataset(120, {3, 20, 20}, 47);
  for (const Case& c : kBatchNormNetworks) check_threads_against_seq(c, c.input.channels == 3 ? colour : grey, false);
  const cnn::Network net = network_of(kBatchNormNetworks.front());
  const std::vector<float> params = params_of(net, 9);
  const std::vector<std::int32_t> order = cnn::Sampler(4, colour.count()).permutation(0);
  const auto run = [&](cnn::BackendKind kind, int threads, std::int64_t count) {
    auto backend = backend_of(net, kind, threads);
    backend->bind_data(colour, colour);
    backend->upload_params(params);
    backend->begin_epoch(order);
    take_step(*backend, net, 0, count, nullptr);
    take_step(*backend, net, count, count, nullptr);
    return std::pair{backend->download_state(), backend->evaluate(0, 60)};
  };
  for (const std::int64_t count : {std::int64_t{50}, std::int64_t{5}}) {
    const auto [reference, reference_eval] = run(cnn::BackendKind::kSeq, 1, count);
    BOOST_TEST_REQUIRE(static_cast<std::int64_t>(reference.size()) == net.state_count);
    BOOST_TEST((reference != net.initial_state()));  // the steps moved them
    for (const int threads : {2, 7}) {
      const auto [state, eval] = run(cnn::BackendKind::kThreads, threads, count);
      BOOST_TEST(cnn::test::relative_error(state, reference) <= 1e-6, "batch " << count << " threads " << threads);
      BOOST_TEST(std::fabs(eval.loss_sum - reference_eval.loss_sum) <= 1e-5 * reference_eval.loss_sum);
      BOOST_TEST(eval.correct == reference_eval.correct);
    }
  }
}

BOOST_AUTO_TEST_CASE(blocks_that_pass_no_gradient_back_and_start_without_parameters) {
  const cnn::Dataset grey = cnn::test::random_dataset(200, {1, 28, 28}, 46);
  const cnn::Dataset colour = cnn::test::random_dataset(200, {3, 20, 20}, 47);
  for (const Case& c : kNoGradientBlocks) {
    check_overlapped_step(c, grey, colour);
    check_threads_against_seq(c, c.input.channels == 3 ? colour : grey, false);
  }
}

BOOST_AUTO_TEST_CASE(an_empty_slice_overlapped_reports_every_range_with_zeros) {
  const cnn::Dataset data = cnn::test::random_dataset(10, {3, 20, 20}, 43);
  const cnn::Network net = cnn::build_network("cifar", 0, data.shape, 10);
  auto backend = backend_of(net, cnn::BackendKind::kThreads, 2);
  backend->bind_data(data, data);
  backend->upload_params(params_of(net, 1));
  backend->begin_epoch(cnn::Sampler(1, data.count()).permutation(0));
  RecordingListener listener(backend->grads());
  const Step step = take_step(*backend, net, 4, 0, &listener);
  BOOST_TEST(step.stats.count == 0);
  BOOST_TEST(std::all_of(step.grads.begin(), step.grads.end(), [](float g) { return g == 0.0f; }));
  BOOST_TEST(static_cast<std::int64_t>(listener.ranges.size()) == layers_with_params(net));
  BOOST_TEST(listener.all_ready);
}
