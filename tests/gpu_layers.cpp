// The general network's layer ops on the GPU against the CPU reference:
//   1. every CUDA layer op (kernels/ops/layer_ops.hpp) and adam_update against its CPU twin, on fresh
//      random data, multi-channel, with stride, padding, odd sizes and overlapping pool windows;
//   2. (disabled unless named: --run_test=measure_cifar_epoch_time, profile_cifar_steps) the cifar
//      preset's ms per epoch, and a few eager steps of it for a kernel profiler.
// The cuda backend on layer networks against `seq`, and its fused ops against the layer ops they
// replace: gpu_layer_networks.cpp; determinism and the overlapped step: gpu_layer_determinism.cpp.
// With no usable GPU it prints "SKIP: ..." and exits with 77, which CTest reports as skipped.
#define BOOST_TEST_MODULE gpu_layers
#include "boost_test.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/cuda_backend.hpp"
#include "cnn/layer_ops.hpp"
#include "cnn/layer_registry.hpp"
#include "cnn/network.hpp"
#include "cnn/ops.hpp"
#include "cnn/optimizer.hpp"
#include "cnn/sampler.hpp"
#include "kernels/ops/cuda_ops.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/ops/layer_ops.hpp"
#include "gpu_layer_runs.hpp"
#include "gpu_test_util.hpp"

namespace {

using namespace cnn::gpu_test;  // tests/gpu_test_util.hpp, gpu_layer_runs.hpp
using cnn::gpu_test::random_data;  // over glibc's struct random_data (stdlib.h)

struct RequireGpu {
  RequireGpu() { require_gpu(); }
};
BOOST_TEST_GLOBAL_FIXTURE(RequireGpu);

// Single ops: fp32 sums in another order than the CPU's, ~1e-6 relative in practice.
constexpr double kOpTolerance = 1e-5;

// ---- 1. ops against their CPU twins ---------------------------------------------------------------

void check_conv(const cnn::ConvShape& s, std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const auto in = uniform(rng, static_cast<std::size_t>(n * s.in_size()), -1.0f, 1.0f);
  const auto weight = uniform(rng, static_cast<std::size_t>(s.weight_size()), -0.5f, 0.5f);
  const auto bias = uniform(rng, static_cast<std::size_t>(s.filters), -0.5f, 0.5f);
  const auto grad_out = uniform(rng, static_cast<std::size_t>(n * s.out_size()), -1.0f, 1.0f);
  // Gradients accumulate: start both from the same non-zero values.
  const auto gw0 = uniform(rng, weight.size(), -0.1f, 0.1f);
  const auto gb0 = uniform(rng, bias.size(), -0.1f, 0.1f);

  std::vector<float> out(static_cast<std::size_t>(n * s.out_size()));
  cnn::conv2d_forward(out.data(), in.data(), weight.data(), bias.data(), n, s);
  std::vector<float> grad_in(in.size()), gw = gw0, gb = gb0;
  cnn::conv2d_backward(grad_in.data(), gw.data(), gb.data(), grad_out.data(), in.data(), weight.data(), n, s);

  auto d_in = to_device(in);
  auto d_w = to_device(weight);
  auto d_b = to_device(bias);
  auto d_go = to_device(grad_out);
  auto d_out = poisoned<float>(static_cast<std::int64_t>(out.size()));
  auto d_gi = poisoned<float>(static_cast<std::int64_t>(grad_in.size()));
  auto d_gw = to_device(gw0);
  auto d_gb = to_device(gb0);
  cnn::cuda::conv2d_forward(d_out.get(), d_in.get(), d_w.get(), d_b.get(), n, s, nullptr);
  cnn::cuda::conv2d_backward(d_gi.get(), d_gw.get(), d_gb.get(), d_go.get(), d_in.get(), d_w.get(), n, s, nullptr);
  CHECK_REL(to_host(d_out), out, kOpTolerance, "conv2d_forward out");
  CHECK_REL(to_host(d_gi), grad_in, kOpTolerance, "conv2d_backward grad_in");
  CHECK_REL(to_host(d_gw), gw, kOpTolerance, "conv2d_backward grad_weight");
  CHECK_REL(to_host(d_gb), gb, kOpTolerance, "conv2d_backward grad_bias");

  // The planned forms the backend uses: ReLU folded into the store, the mask on the input
  // gradient, and = instead of +=.
  const cnn::cuda::LayerPlans plans = cnn::cuda::plan_conv(s, n, cnn::cuda::multiprocessor_count());
  DeviceBuffer<float> workspace(std::max<std::int64_t>(plans.workspace_floats(), 1));
  cnn::cuda::conv2d_forward_planned(plans.forward, d_out.get(), d_in.get(), d_w.get(), d_b.get(), n, s, true,
                                    workspace.get(), nullptr);
  std::vector<float> relu_out = out;
  for (float& v : relu_out) v = std::max(v, 0.0f);
  CHECK_REL(to_host(d_out), relu_out, kOpTolerance, "conv2d_forward_planned with ReLU");
  std::vector<float> masked = grad_in;
  for (std::size_t i = 0; i < masked.size(); ++i)
    if (!(in[i] > 0.0f)) masked[i] = 0.0f;
  BOOST_TEST(plans.dgrad_by_columns);
  cnn::cuda::conv2d_backward_data(plans, d_gi.get(), d_go.get(), d_w.get(), d_in.get(), n, s, workspace.get(), nullptr);
  CHECK_REL(to_host(d_gi), masked, kOpTolerance, "conv2d_backward_data by columns, with mask");
  // The direct product, taken when the columns would not fit (here: a cap of 0 floats).
  const cnn::cuda::LayerPlans direct = cnn::cuda::plan_conv(s, n, cnn::cuda::multiprocessor_count(), 0);
  BOOST_TEST(!direct.dgrad_by_columns);
  DeviceBuffer<float> direct_workspace(std::max<std::int64_t>(direct.workspace_floats(), 1));
  d_gi = poisoned<float>(static_cast<std::int64_t>(grad_in.size()));
  cnn::cuda::conv2d_backward_data(direct, d_gi.get(), d_go.get(), d_w.get(), d_in.get(), n, s, direct_workspace.get(),
                                  nullptr);
  CHECK_REL(to_host(d_gi), masked, kOpTolerance, "conv2d_backward_data direct, with mask");
  std::vector<float> gw_fresh(weight.size(), 0.0f), gb_fresh(bias.size(), 0.0f);
  cnn::conv2d_backward(nullptr, gw_fresh.data(), gb_fresh.data(), grad_out.data(), in.data(), weight.data(), n, s);
  cnn::cuda::conv2d_backward_weights(plans.wgrad, d_gw.get(), d_gb.get(), d_go.get(), d_in.get(), n, s, false,
                                     workspace.get(), nullptr);
  CHECK_REL(to_host(d_gw), gw_fresh, kOpTolerance, "conv2d_backward_weights overwrite");
  CHECK_REL(to_host(d_gb), gb_fresh, kOpTolerance, "conv2d_backward_weights bias overwrite");
}

BOOST_AUTO_TEST_CASE(conv2d_matches_cpu) {
  struct Case {
    cnn::ConvShape shape;
    std::int64_t n;
  };
  //                C   H   W   F  K  S  P
  const Case cases[] = {{{3, 11, 9, 5, 3, 2, 1}, 7},     // stride 2, pad 1, odd sizes
                        {{4, 8, 8, 6, 3, 1, 0}, 3},      // plain
                        {{2, 7, 10, 7, 5, 1, 2}, 5},     // 5x5, pad 2
                        {{5, 9, 9, 3, 1, 1, 0}, 4},      // 1x1
                        {{3, 13, 12, 9, 4, 3, 2}, 6},    // even kernel, stride 3
                        {{3, 32, 32, 32, 3, 1, 0}, 33},  // cifar conv1
                        {{32, 15, 15, 64, 3, 1, 0}, 9},  // cifar conv2
                        {{64, 6, 6, 64, 3, 1, 0}, 40}};  // cifar conv3, many samples per split
  std::uint32_t seed = 10;
  for (const Case& c : cases) {
    const cnn::ConvShape& s = c.shape;
    BOOST_TEST_CONTEXT("conv C=" << s.channels << " " << s.height << "x" << s.width << " F=" << s.filters
                                 << " K=" << s.kernel << " S=" << s.stride << " P=" << s.pad << " n=" << c.n) {
      check_conv(s, c.n, seed++);
    }
  }
}

BOOST_AUTO_TEST_CASE(relu_and_maxpool_match_cpu) {
  std::mt19937 rng(21);
  const std::int64_t count = 10007;
  const auto in = uniform(rng, static_cast<std::size_t>(count), -1.0f, 1.0f);
  const auto grad = uniform(rng, static_cast<std::size_t>(count), -1.0f, 1.0f);
  std::vector<float> out(in.size()), grad_in(in.size());
  cnn::relu_forward(out.data(), in.data(), count);
  cnn::relu_backward(grad_in.data(), grad.data(), out.data(), count);
  auto d_in = to_device(in);
  auto d_g = to_device(grad);
  auto d_out = poisoned<float>(count);
  auto d_gi = poisoned<float>(count);
  cnn::cuda::relu_forward(d_out.get(), d_in.get(), count, nullptr);
  cnn::cuda::relu_backward(d_gi.get(), d_g.get(), d_out.get(), count, nullptr);
  BOOST_TEST(bitwise_equal(to_host(d_out), out), "relu_forward");
  BOOST_TEST(bitwise_equal(to_host(d_gi), grad_in), "relu_backward");

  //                       C   H   W  size stride
  const cnn::PoolShape pools[] = {{3, 8, 8, 2, 2}, {4, 9, 7, 2, 2}, {2, 11, 10, 3, 2}, {3, 10, 9, 3, 1}, {5, 7, 7, 3, 3}};
  for (const cnn::PoolShape& p : pools) {
    BOOST_TEST_CONTEXT("maxpool C=" << p.channels << " " << p.height << "x" << p.width << " size " << p.size
                                    << " stride " << p.stride) {
      const std::int64_t n = 5;
      const auto x = uniform(rng, static_cast<std::size_t>(n * p.in_size()), -1.0f, 1.0f);
      const auto go = uniform(rng, static_cast<std::size_t>(n * p.out_size()), -1.0f, 1.0f);
      std::vector<float> y(static_cast<std::size_t>(n * p.out_size())), gx(x.size());
      std::vector<std::int32_t> arg(y.size());
      cnn::maxpool_forward(y.data(), arg.data(), x.data(), n, p);
      cnn::maxpool_backward(gx.data(), go.data(), arg.data(), n, p);
      auto d_x = to_device(x);
      auto d_go = to_device(go);
      auto d_y = poisoned<float>(static_cast<std::int64_t>(y.size()));
      auto d_arg = poisoned<std::int32_t>(static_cast<std::int64_t>(y.size()));
      auto d_gx = poisoned<float>(static_cast<std::int64_t>(x.size()));
      cnn::cuda::maxpool_forward(d_y.get(), d_arg.get(), d_x.get(), n, p, nullptr);
      cnn::cuda::maxpool_backward(d_gx.get(), d_go.get(), d_arg.get(), n, p, nullptr);
      BOOST_TEST(bitwise_equal(to_host(d_y), y), "maxpool_forward out");
      BOOST_TEST((to_host(d_arg) == arg), "maxpool_forward argmax");
      // Overlapping windows add several terms; the order is the CPU's, row-major.
      CHECK_REL(to_host(d_gx), gx, kOpTolerance, "maxpool_backward");
      // With a ReLU's backward folded in, read through the pool's output: zero where the input <= 0.
      std::vector<float> gx_masked = gx;
      for (std::size_t i = 0; i < gx_masked.size(); ++i)
        if (!(x[i] > 0.0f)) gx_masked[i] = 0.0f;
      d_gx = poisoned<float>(static_cast<std::int64_t>(x.size()));
      cnn::cuda::maxpool_backward_masked(d_gx.get(), d_go.get(), d_arg.get(), d_y.get(), n, p, nullptr);
      CHECK_REL(to_host(d_gx), gx_masked, kOpTolerance, "maxpool_backward_masked");
    }
  }
}

// avgpool's twins give the CPU's bits (the same sums in the same order, one product by the scale),
// windowed and global, with the ReLU mask folded into the backward; dropout's draw the CPU's masks
// from the MaskOrigin in device memory, for a slice that starts inside the global batch, and P = 0
// copies every bit.
BOOST_AUTO_TEST_CASE(avgpool_and_dropout_match_cpu) {
  std::mt19937 rng(23);
  //                               C   H   W  wh ww stride
  std::vector<cnn::AvgPoolShape> pools = {{3, 8, 8, 2, 2, 2}, {2, 11, 10, 3, 3, 2}, {3, 10, 9, 3, 3, 1}, {4, 7, 5, 7, 5, 1}};
  pools.back().global = true;
  for (const cnn::AvgPoolShape& p : pools) {
    BOOST_TEST_CONTEXT("avgpool C=" << p.channels << " " << p.height << "x" << p.width << " window " << p.window_h
                                    << "x" << p.window_w << " stride " << p.stride) {
      const std::int64_t n = 5;
      const auto x = uniform(rng, static_cast<std::size_t>(n * p.in_size()), -1.0f, 1.0f);
      const auto go = uniform(rng, static_cast<std::size_t>(n * p.out_size()), -1.0f, 1.0f);
      std::vector<float> y(static_cast<std::size_t>(n * p.out_size())), gx(x.size());
      cnn::avgpool_forward(y.data(), x.data(), n, p);
      cnn::avgpool_backward(gx.data(), go.data(), n, p);
      auto d_x = to_device(x);
      auto d_go = to_device(go);
      auto d_y = poisoned<float>(static_cast<std::int64_t>(y.size()));
      auto d_gx = poisoned<float>(static_cast<std::int64_t>(x.size()));
      cnn::cuda::avgpool_forward(d_y.get(), d_x.get(), n, p, nullptr);
      cnn::cuda::avgpool_backward(d_gx.get(), d_go.get(), n, p, nullptr);
      BOOST_TEST(bitwise_equal(to_host(d_y), y), "avgpool_forward");
      BOOST_TEST(bitwise_equal(to_host(d_gx), gx), "avgpool_backward");
      std::vector<float> gx_masked = gx;
      for (std::size_t i = 0; i < gx_masked.size(); ++i)
        if (!(x[i] > 0.0f)) gx_masked[i] = 0.0f;
      d_gx = poisoned<float>(static_cast<std::int64_t>(x.size()));
      cnn::cuda::avgpool_backward_masked(d_gx.get(), d_go.get(), d_x.get(), n, p, nullptr);
      BOOST_TEST(bitwise_equal(to_host(d_gx), gx_masked), "avgpool_backward_masked");
    }
  }

  for (const double rate : {0.0, 0.1, 0.5, 0.9}) {
    BOOST_TEST_CONTEXT("dropout P=" << rate) {
      const std::int64_t n = 7, size = 1031;
      const auto x = uniform(rng, static_cast<std::size_t>(n * size), -1.0f, 1.0f);
      const auto go = uniform(rng, x.size(), -1.0f, 1.0f);
      const cnn::DropoutDraw draw = cnn::dropout_draw(rate, 3);
      const cnn::MaskOrigin origin{cnn::dropout_step_key(5, 41), 19};
      std::vector<float> y(x.size()), gx(x.size());
      cnn::dropout_forward(y.data(), x.data(), n, size, draw, origin);
      cnn::dropout_backward(gx.data(), go.data(), n, size, draw, origin);
      DeviceBuffer<cnn::MaskOrigin> d_origin(1);
      cnn::cuda::set_mask_origin(d_origin.get(), origin, nullptr);
      auto d_x = to_device(x);
      auto d_go = to_device(go);
      auto d_y = poisoned<float>(static_cast<std::int64_t>(y.size()));
      auto d_gx = poisoned<float>(static_cast<std::int64_t>(x.size()));
      cnn::cuda::dropout_forward(d_y.get(), d_x.get(), n, size, draw, d_origin.get(), nullptr);
      cnn::cuda::dropout_backward(d_gx.get(), d_go.get(), n, size, draw, d_origin.get(), nullptr);
      BOOST_TEST(bitwise_equal(to_host(d_y), y), "dropout_forward");
      BOOST_TEST(bitwise_equal(to_host(d_gx), gx), "dropout_backward");
      if (rate == 0.0) BOOST_TEST(bitwise_equal(y, x), "dropout:0 keeps every bit");
    }
  }
}

BOOST_AUTO_TEST_CASE(general_fc_matches_cpu) {
  std::mt19937 rng(31);
  for (auto [n, I, O] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{32, 1024, 64}, {7, 33, 5}, {200, 64, 10}}) {
    BOOST_TEST_CONTEXT("fc n=" << n << " I=" << I << " O=" << O) {
      const auto in = uniform(rng, static_cast<std::size_t>(n * I), -1.0f, 1.0f);
      const auto w = uniform(rng, static_cast<std::size_t>(O * I), -0.2f, 0.2f);
      const auto b = uniform(rng, static_cast<std::size_t>(O), -0.2f, 0.2f);
      const auto go = uniform(rng, static_cast<std::size_t>(n * O), -1.0f, 1.0f);
      const auto gw0 = uniform(rng, w.size(), -0.1f, 0.1f);
      const auto gb0 = uniform(rng, b.size(), -0.1f, 0.1f);
      std::vector<float> out(static_cast<std::size_t>(n * O)), gi(in.size()), gw = gw0, gb = gb0;
      cnn::fc_forward(out.data(), in.data(), w.data(), b.data(), n, I, O);
      cnn::fc_backward(gi.data(), gw.data(), gb.data(), go.data(), in.data(), w.data(), n, I, O);
      auto d_in = to_device(in);
      auto d_w = to_device(w);
      auto d_b = to_device(b);
      auto d_go = to_device(go);
      auto d_out = poisoned<float>(n * O);
      auto d_gi = poisoned<float>(n * I);
      auto d_gw = to_device(gw0);
      auto d_gb = to_device(gb0);
      cnn::cuda::fc_forward(d_out.get(), d_in.get(), d_w.get(), d_b.get(), n, I, O, nullptr);
      cnn::cuda::fc_backward(d_gi.get(), d_gw.get(), d_gb.get(), d_go.get(), d_in.get(), d_w.get(), n, I, O, nullptr);
      CHECK_REL(to_host(d_out), out, kOpTolerance, "fc_forward");
      CHECK_REL(to_host(d_gi), gi, kOpTolerance, "fc_backward grad_in");
      CHECK_REL(to_host(d_gw), gw, kOpTolerance, "fc_backward grad_weight");
      CHECK_REL(to_host(d_gb), gb, kOpTolerance, "fc_backward grad_bias");
    }
  }
}

BOOST_AUTO_TEST_CASE(adam_matches_cpu) {
  std::mt19937 rng(41);
  const std::size_t n = 100003;
  auto p = uniform(rng, n, -1.0f, 1.0f);
  auto m = uniform(rng, n, -0.01f, 0.01f);
  auto v = uniform(rng, n, 0.0f, 1e-4f);
  auto d_p = to_device(p);
  auto d_m = to_device(m);
  auto d_v = to_device(v);
  // Plain, then adam's L2 decay, then adamw's decoupled decay (--weight-decay): the host's constants
  // (cnn::adam_step) go to both twins.
  const std::pair<cnn::OptimizerKind, float> kinds[] = {{cnn::OptimizerKind::kAdam, 0.0f},
                                                        {cnn::OptimizerKind::kAdam, 0.01f},
                                                        {cnn::OptimizerKind::kAdamW, 0.01f},
                                                        {cnn::OptimizerKind::kAdamW, 0.1f}};
  std::int64_t round = 0;
  for (std::int64_t step : {1, 2, 7, 1000}) {
    const auto g = uniform(rng, n, -50.0f, 50.0f);
    cnn::OptimizerSettings settings;
    settings.kind = kinds[round].first;
    settings.weight_decay = kinds[round].second;
    settings.lr = 1e-3f;
    settings.step = step;
    ++round;
    const cnn::AdamStep constants = cnn::adam_step(settings);
    cnn::adam_update(p.data(), m.data(), v.data(), g.data(), static_cast<std::int64_t>(n), constants, 1.0f / 64);
    auto d_g = to_device(g);
    cnn::cuda::adam_update(d_p.get(), d_m.get(), d_v.get(), d_g.get(), static_cast<std::int64_t>(n), constants,
                           1.0f / 64, nullptr);
    BOOST_TEST_CONTEXT("step " << step << ", " << cnn::optimizer_name(settings.kind) << ", weight decay "
                               << settings.weight_decay) {
      CHECK_REL(to_host(d_p), p, 1e-6, "adam params");
      CHECK_REL(to_host(d_m), m, 1e-6, "adam m");
      CHECK_REL(to_host(d_v), v, 1e-6, "adam v");
    }
  }
}

// ---- 2. measurement ---------------------------------------------------------------------------------

// The precisions a measurement runs: CNN_MEASURE_PRECISIONS, a comma-separated list of fp32, tf32,
// bf16 (default fp32, what the before/after scripts of kernels/bench compare).
std::vector<cnn::Precision> measured_precisions() {
  const char* env = std::getenv("CNN_MEASURE_PRECISIONS");
  const std::string list = env != nullptr ? env : "fp32";
  std::vector<cnn::Precision> precisions;
  for (const cnn::Precision p : {cnn::Precision::kFp32, cnn::Precision::kTf32, cnn::Precision::kBf16})
    if (("," + list + ",").find("," + std::string(cnn::precision_name(p)) + ",") != std::string::npos)
      precisions.push_back(p);
  return precisions;
}

// The cifar preset on CIFAR-shaped random data (50000 images of 3x32x32), Adam, train steps only
// (compute_gradients + apply_update, one rank); one warm-up epoch, then the median of 3, in each of
// measured_precisions(); the step eagerly too in fp32. Run with
//   CNN_MEASURE_PRECISIONS=fp32,tf32,bf16 ./gpu_layers --run_test=measure_cifar_epoch_time
BOOST_AUTO_TEST_CASE(measure_cifar_epoch_time, *boost::unit_test::disabled() * boost::unit_test::label("measurement")) {
  constexpr std::int64_t kImages = 50000;
  const cnn::Network net = cnn::build_network("cifar", 32, {3, 32, 32}, 10);
  const RandomData data = random_data(net.input, kImages, 1000, 2024);
  std::printf("%s\n%-6s %-9s %-7s %10s %9s %10s  %s\n", net.describe().c_str(), "batch", "precision", "graphs",
              "ms/epoch", "us/step", "train loss", "phases of the last epoch, ms (data/forward/backward/update)");
  for (const cnn::Precision precision : measured_precisions())
  for (std::int64_t batch : {32, 128, 512, 2048}) {
    for (bool graphs : {true, false}) {
      if (!graphs && precision != cnn::Precision::kFp32) continue;
      auto gpu = make("cuda", net, cnn::OptimizerKind::kAdam, graphs, {}, precision);
      gpu->bind_data(data.train, data.test);
      gpu->upload_params(initial_params(net, 1));
      const cnn::Sampler sampler(11, kImages);
      cnn::OptimizerSettings adam;
      adam.kind = cnn::OptimizerKind::kAdam;
      adam.lr = 1e-3f;
      std::vector<double> ms;
      double loss = 0.0;
      cnn::PhaseTimes phases;
      std::int64_t step = 0;
      const int epochs = graphs ? 4 : 2;
      for (int epoch = 0; epoch < epochs; ++epoch) {
        gpu->begin_epoch(sampler.permutation(epoch));
        gpu->synchronize();
        const auto start = std::chrono::steady_clock::now();
        for (std::int64_t first = 0; first < kImages; first += batch) {
          const std::int64_t count = std::min(batch, kImages - first);
          gpu->compute_gradients(first, count);
          adam.step = ++step;
          gpu->apply_update(adam, 1.0f / static_cast<float>(count));
        }
        gpu->synchronize();
        const double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        const cnn::BatchStats stats = gpu->take_train_stats();
        phases = gpu->take_phase_times();
        loss = stats.loss_sum / static_cast<double>(stats.count);
        if (epoch > 0) ms.push_back(elapsed);
      }
      std::sort(ms.begin(), ms.end());
      const double median = ms[ms.size() / 2];
      const double steps = std::ceil(static_cast<double>(kImages) / static_cast<double>(batch));
      std::printf("%-6lld %-9s %-7s %10.2f %9.1f %10.4f  %.2f/%.2f/%.2f/%.2f\n", static_cast<long long>(batch),
                  cnn::precision_name(precision), graphs ? "on" : "off", median, 1000.0 * median / steps, loss, 1e3 * phases.get(cnn::Phase::kData),
                  1e3 * phases.get(cnn::Phase::kForward), 1e3 * phases.get(cnn::Phase::kBackward),
                  1e3 * phases.get(cnn::Phase::kUpdate));
      std::fflush(stdout);
      BOOST_TEST(std::isfinite(loss));
    }
  }
}

// The batches of profile_cifar_steps: CNN_PROFILE_BATCHES (a comma list, each at most 2048: two steps of
// the 4096 images), default 512,2048.
std::vector<std::int64_t> profiled_batches() {
  const char* env = std::getenv("CNN_PROFILE_BATCHES");
  std::vector<std::int64_t> batches;
  const std::string list = env != nullptr ? env : "512,2048";
  for (std::size_t at = 0; at < list.size();) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("CNN_PROFILE_BATCHES: '" + item + "' is not a batch size (a comma list of integers)");
    batches.push_back(std::clamp<std::int64_t>(std::stoll(item), 1, 2048));
    at = comma + 1;
  }
  return batches;
}

// A few eager steps per batch (profiled_batches) and precision (measured_precisions), for a kernel profiler:
//   ncu --clock-control none --print-summary per-kernel ./gpu_layers --run_test=profile_cifar_steps
BOOST_AUTO_TEST_CASE(profile_cifar_steps, *boost::unit_test::disabled() * boost::unit_test::label("measurement")) {
  const cnn::Network net = cnn::build_network("cifar", 32, {3, 32, 32}, 10);
  const RandomData data = random_data(net.input, 4096, 100, 99);
  for (const cnn::Precision precision : measured_precisions())
  for (std::int64_t batch : profiled_batches()) {
    auto gpu = make("cuda", net, cnn::OptimizerKind::kAdam, false, {}, precision);
    gpu->bind_data(data.train, data.test);
    gpu->upload_params(initial_params(net, 1));
    gpu->begin_epoch(cnn::Sampler(1, data.train.count()).permutation(0));
    cnn::OptimizerSettings adam;
    adam.kind = cnn::OptimizerKind::kAdam;
    for (int step = 0; step < 2; ++step) {
      gpu->compute_gradients(step * batch, batch);
      adam.step = step + 1;
      gpu->apply_update(adam, 1.0f / static_cast<float>(batch));
    }
    gpu->synchronize();
  }
}

}  // namespace
