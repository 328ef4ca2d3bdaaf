// The general network on the GPU against the CPU reference:
//   1. every CUDA layer op (kernels/ops/layer_ops.hpp) and adam_update against its CPU twin, on fresh
//      random data, multi-channel, with stride, padding, odd sizes and overlapping pool windows;
//   2. the cuda backend on layer networks against `seq`: the cifar preset's loss and every gradient,
//      a strided/padded network, and three Adam steps; a cosine lr with warm-up, weight decay,
//      Nesterov, AdamW and label smoothing on the seed op and a layer network; residual networks
//      (res[...]) with identity and projection shortcuts, a block after a ReLU (the identity's
//      gradient masked), a block first, a body that starts with a ReLU and one whose last conv folds
//      a ReLU in, with the CUDA plan and with nothing folded;
//   3. its fused ops against the layer ops they replace, on the GPU and against `seq`: the seed
//      model's conv_relu_pool_fc_softmax against conv_relu_pool + fc and against every layer on its
//      own, and the cifar preset's first conv_relu_pool against conv, relu and maxpool (the op lists
//      come from plan_ops for other targets, through make_cuda_backend(options, network, ops));
//   4. determinism: two identical runs (graphs), and graphs against eager steps, give identical bits;
//      the overlapped step (per-layer ready points, a stream-ordered listener) gives the plain step's
//      bits and reports its ranges in order, a residual block's one per inner conv (body last to first,
//      then the shortcut);
//   5. (disabled unless named: --run_test=measure_cifar_epoch_time) the cifar preset's ms per epoch.
// With no usable GPU it prints "SKIP: ..." and exits with 77, which CTest reports as skipped.
#define BOOST_TEST_MODULE gpu_layers
#include "boost_test.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/cuda_backend.hpp"
#include "cnn/gradient_ready.hpp"
#include "cnn/layer_ops.hpp"
#include "cnn/layer_registry.hpp"
#include "cnn/lr_schedule.hpp"
#include "cnn/network.hpp"
#include "cnn/op_plan.hpp"
#include "cnn/ops.hpp"
#include "cnn/optimizer.hpp"
#include "cnn/sampler.hpp"
#include "kernels/ops/cuda_ops.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/ops/layer_ops.hpp"
#include "gpu_test_util.hpp"

namespace {

using namespace cnn::gpu_test;  // tests/gpu_test_util.hpp

struct RequireGpu {
  RequireGpu() { require_gpu(); }
};
BOOST_TEST_GLOBAL_FIXTURE(RequireGpu);

// Single ops: fp32 sums in another order than the CPU's, ~1e-6 relative in practice.
constexpr double kOpTolerance = 1e-5;
// Whole steps through five layers: the same, compounded, plus the rare ReLU or pool near-tie.
constexpr double kStepTolerance = 1e-4;

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

// ---- 2-4. the layer ops ---------------------------------------------------------------------------

struct RandomData {
  cnn::Dataset train, test;
};

RandomData random_data(cnn::TensorShape shape, std::int64_t train_count, std::int64_t test_count, std::uint32_t seed) {
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

std::vector<float> initial_params(const cnn::Network& net, std::uint64_t seed) {
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
std::unique_ptr<cnn::Backend> make(const std::string& kind, const cnn::Network& net, cnn::OptimizerKind optimizer,
                                   bool graphs = true, const std::vector<cnn::Op>& ops = {},
                                   cnn::Precision precision = cnn::Precision::kFp32, float label_smoothing = 0.0f) {
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
std::vector<cnn::Op> unfused_ops(const cnn::Network& net) {
  return cnn::plan_ops(net, cnn::FusionTarget::kReference);
}

// The seed network on the GPU without its whole-model op: the fused conv_relu_pool, reading the data
// set itself as the first op of a cuda plan does, then fc and the loss on their own.
std::vector<cnn::Op> seed_layer_ops(const cnn::Network& net) {
  std::vector<cnn::Op> ops = cnn::plan_ops(net, cnn::FusionTarget::kCpu);
  BOOST_REQUIRE_EQUAL(cnn::describe_ops(ops), "conv_relu_pool fc softmax_cross_entropy");
  ops.front().reads_data = true;
  return ops;
}

// "ops A B C," as the backend's description lists them.
std::string ops_text(const std::vector<cnn::Op>& ops) { return "ops " + cnn::describe_ops(ops) + ","; }

struct Run {
  std::vector<float> grads;  // of the last step
  std::vector<float> params, state;
  cnn::BatchStats stats, eval;
  std::vector<float> logits;  // evaluate_logits over the test split (cnn_mpi predict)
  std::string description;
};

// `steps` steps of `batch` (the last one 13 samples smaller: a second batch size, a second graph),
// updating with `optimizer` between them; the gradients of the last step are kept.
Run train(const std::string& kind, const cnn::Network& net, const RandomData& data, cnn::OptimizerKind optimizer,
          int steps, std::int64_t batch, bool graphs = true, const std::vector<cnn::Op>& ops = {},
          const Regime& regime = {}) {
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

void check_against(const Run& got, const Run& want, const cnn::Network& net, double tolerance) {
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

BOOST_AUTO_TEST_CASE(cifar_preset_matches_seq) {
  const cnn::Network net = cnn::build_network("cifar", 32, {3, 32, 32}, 10);
  const RandomData data = random_data(net.input, 400, 150, 51);
  for (auto optimizer : {cnn::OptimizerKind::kSgd, cnn::OptimizerKind::kAdam}) {
    BOOST_TEST_CONTEXT("cifar, " << cnn::optimizer_name(optimizer)) {
      const int steps = optimizer == cnn::OptimizerKind::kSgd ? 1 : 3;
      const Run seq = train("seq", net, data, optimizer, steps, 77);
      const Run gpu = train("cuda", net, data, optimizer, steps, 77);
      std::printf("cifar preset, %s, %d step(s): %s vs seq\n", cnn::optimizer_name(optimizer), steps,
                  gpu.description.c_str());
      BOOST_TEST(gpu.description.find("ops conv_relu_pool conv+relu maxpool conv+relu fc+relu fc softmax_cross_entropy,") !=
                     std::string::npos,
                 gpu.description);
      check_against(gpu, seq, net, kStepTolerance);
      if (optimizer == cnn::OptimizerKind::kAdam) CHECK_REL(gpu.state, seq.state, kStepTolerance, "adam state");
    }
  }
}

// Stride, padding, an even kernel, overlapping pool windows, a ReLU after a pool and two fc layers.
BOOST_AUTO_TEST_CASE(strided_padded_network_matches_seq) {
  const cnn::Network net = cnn::build_network("conv3x3:8/s2/p1 relu conv4x4:6/p2 maxpool3/s2 relu conv1x1:5 relu "
                                              "flatten fc:16 relu fc:10",
                                              0, {3, 17, 15}, 10);
  const RandomData data = random_data(net.input, 300, 60, 52);
  const Run seq = train("seq", net, data, cnn::OptimizerKind::kMomentum, 2, 50);
  const Run gpu = train("cuda", net, data, cnn::OptimizerKind::kMomentum, 2, 50);
  std::printf("%s: %s vs seq\n", net.describe().c_str(), gpu.description.c_str());
  check_against(gpu, seq, net, kStepTolerance);
}

// Issue 26: a cosine lr with warm-up, so every step's update has a new lr while the steps replay their
// CUDA graphs (the update runs after the graph, its lr a plain argument), with weight decay, Nesterov
// momentum or AdamW's decoupled decay, and label smoothing in the loss: on the fused seed op (its own
// loss kernel) and on a layer network (the softmax_cross_entropy op), against `seq`, and graphs
// against eager steps bit for bit.
BOOST_AUTO_TEST_CASE(schedule_and_regularisers_match_seq_through_graph_replays) {
  struct Case {
    const char* spec;
    int filters;
    cnn::TensorShape input;
    cnn::OptimizerKind optimizer;
    const char* cuda_ops;
  };
  const Case cases[] = {
      {"seed", 8, {1, 28, 28}, cnn::OptimizerKind::kMomentum, "ops conv_relu_pool_fc_softmax,"},
      {"seed", 8, {1, 28, 28}, cnn::OptimizerKind::kAdamW, "ops conv_relu_pool_fc_softmax,"},
      {"conv3x3:8/p1 relu maxpool2 conv3x3:8/p1 relu fc:16 relu fc:10", 0, {3, 16, 16},
       cnn::OptimizerKind::kMomentum, "softmax_cross_entropy,"},
      {"conv3x3:8/p1 relu maxpool2 conv3x3:8/p1 relu fc:16 relu fc:10", 0, {3, 16, 16}, cnn::OptimizerKind::kAdam,
       "softmax_cross_entropy,"},
  };
  constexpr int kSteps = 6;
  std::uint32_t seed = 60;
  for (const Case& c : cases) {
    const cnn::Network net = cnn::build_network(c.spec, c.filters, c.input, 10);
    const RandomData data = random_data(net.input, 400, 60, seed++);
    const bool adam = c.optimizer != cnn::OptimizerKind::kMomentum;
    const cnn::LearningRate lr(adam ? 2e-3 : 0.08, cnn::parse_lr_schedule("cosine"), 2, kSteps, kSteps);
    Regime regime;
    regime.weight_decay = adam ? 0.05f : 5e-3f;
    regime.nesterov = !adam;
    regime.label_smoothing = 0.1f;
    regime.lr = &lr;
    BOOST_TEST_CONTEXT(c.spec << ", " << cnn::optimizer_name(c.optimizer)) {
      const Run seq = train("seq", net, data, c.optimizer, kSteps, 50, true, {}, regime);
      const Run gpu = train("cuda", net, data, c.optimizer, kSteps, 50, true, {}, regime);
      const Run eager = train("cuda", net, data, c.optimizer, kSteps, 50, false, {}, regime);
      std::printf("%s, %s, cosine + warm-up, decay, smoothing: %s vs seq\n", net.describe().c_str(),
                  cnn::optimizer_name(c.optimizer), gpu.description.c_str());
      BOOST_TEST(gpu.description.find(c.cuda_ops) != std::string::npos, gpu.description);
      check_against(gpu, seq, net, kStepTolerance);
      CHECK_REL(gpu.state, seq.state, kStepTolerance, "optimizer state");
      BOOST_TEST(bitwise_equal(gpu.params, eager.params), "graph and eager runs differ");
      BOOST_TEST(bitwise_equal(gpu.state, eager.state), "graph and eager optimizer states differ");
    }
  }
}

// Residual blocks (kernels/layers/residual.cu) against `seq`: each network with the CUDA plan (ReLUs
// folded into the convs before them, inside bodies too) and with the reference plan (every layer its
// own op, nothing folded), three Adam steps. Where the block's input is a ReLU's output the gradient
// out of the block is masked by its first ops and by the identity's add; where its body's last conv
// folds a ReLU, the block takes the gradient before that ReLU itself.
void check_residual_network(const char* spec, cnn::TensorShape input, std::uint32_t seed) {
  const cnn::Network net = cnn::build_network(spec, 0, input, 10);
  const RandomData data = random_data(net.input, 300, 60, seed);
  const std::vector<cnn::Op> cuda_ops = cnn::plan_ops(net, cnn::FusionTarget::kCuda);
  const Run seq = train("seq", net, data, cnn::OptimizerKind::kAdam, 3, 64);
  const Run gpu = train("cuda", net, data, cnn::OptimizerKind::kAdam, 3, 64);
  const Run eager = train("cuda", net, data, cnn::OptimizerKind::kAdam, 3, 64, false);
  const Run unfused = train("cuda", net, data, cnn::OptimizerKind::kAdam, 3, 64, true, unfused_ops(net));
  BOOST_TEST_CONTEXT(spec << " on " << cnn::shape_text(input)) {
    std::printf("%s: %s and %s vs seq\n", net.describe().c_str(), gpu.description.c_str(), unfused.description.c_str());
    BOOST_TEST(gpu.description.find(ops_text(cuda_ops)) != std::string::npos, gpu.description);
    BOOST_TEST(unfused.description.find(ops_text(unfused_ops(net))) != std::string::npos, unfused.description);
    check_against(gpu, seq, net, kStepTolerance);
    check_against(unfused, seq, net, kStepTolerance);
    BOOST_TEST(bitwise_equal(gpu.params, eager.params), "graph and eager runs differ");
    CHECK_REL(gpu.state, seq.state, kStepTolerance, "adam state");
  }
}

// Average pools (windowed, global, after folded ReLUs, in a block) and dropout (after a pool, after an
// fc, first, in a block): the cuda plan, eager and unfused, against seq. The masks of each step come
// from the MaskOrigin written before it, so a graph replay drops what seq drops at that step.
BOOST_AUTO_TEST_CASE(pooling_and_dropout_networks_match_seq) {
  check_residual_network("conv3x3:8/p1 relu avgpool2 dropout:0.25 conv3x3:8/p1 relu avgpool fc:32 relu dropout:0.5 fc:10",
                         {3, 16, 16}, 91);
  check_residual_network("conv3x3:8/p1 relu res[conv3x3:8/p1 dropout:0.3 relu avgpool2] avgpool3/s1 fc:10", {3, 16, 16},
                         92);
  check_residual_network("dropout:0.2 conv3x3:8 relu avgpool3/s2 fc:10", {1, 28, 28}, 93);
}

BOOST_AUTO_TEST_CASE(residual_networks_match_seq) {
  struct Case {
    const char* spec;
    cnn::TensorShape input;
    const char* cuda_ops;  // what the CUDA plan makes of it
  };
  const Case cases[] = {
      // An identity block right after a ReLU (folded into conv1: the block's input is a ReLU's output).
      {"conv3x3:8/p1 relu res[conv3x3:8/p1 relu conv3x3:8/p1] relu maxpool2 fc:10", {3, 16, 16},
       "conv+relu res[conv+relu conv] relu maxpool fc softmax_cross_entropy"},
      // A projection block (stride 2), then a block whose body ends with a max-pool: 16 -> 8 -> 4.
      {"conv3x3:8/p1 relu res[conv3x3:16/s2/p1 relu conv3x3:16/p1] relu res[conv3x3:16/p1 relu maxpool2] fc:10",
       {3, 16, 16}, "conv+relu res[conv+relu conv | conv] relu res[conv+relu maxpool | conv] fc softmax_cross_entropy"},
      // A block as the first layer: no gradient out of its body's first conv nor out of its shortcut.
      {"res[conv3x3:8/s2/p1 relu conv3x3:8/p1] relu maxpool2 fc:10", {1, 28, 28},
       "res[conv+relu conv | conv] relu maxpool fc softmax_cross_entropy"},
      // A body that starts with a ReLU, after a conv with none (the block's input is no ReLU's output).
      {"conv3x3:8/p1 res[relu conv3x3:8/p1 relu conv3x3:8/p1] maxpool2 fc:10", {3, 16, 16},
       "conv res[relu conv+relu conv] maxpool fc softmax_cross_entropy"},
      // The body's last conv folds a ReLU: identity, and projection with a ReLU after the sum.
      {"conv3x3:8/p1 relu res[conv3x3:8/p1 relu conv3x3:8/p1 relu] fc:10", {3, 16, 16},
       "conv+relu res[conv+relu conv+relu] fc softmax_cross_entropy"},
      {"conv3x3:8/p1 relu res[conv3x3:16/s2/p1 relu conv3x3:16/p1 relu] relu fc:10", {3, 16, 16},
       "conv+relu res[conv+relu conv+relu | conv] relu fc softmax_cross_entropy"},
      // A block without parameters, then the fused first conv_relu_pool (reading floats: not the first op),
      // then an identity block after it.
      {"res[relu] conv3x3:8 relu maxpool2 res[conv3x3:8/p1] relu fc:10", {3, 16, 16},
       "res[relu] conv_relu_pool res[conv] relu fc softmax_cross_entropy"},
  };
  std::uint32_t seed = 90;
  for (const Case& c : cases) {
    BOOST_TEST(cnn::describe_ops(cnn::plan_ops(cnn::build_network(c.spec, 0, c.input, 10), cnn::FusionTarget::kCuda)) ==
               c.cuda_ops);
    check_residual_network(c.spec, c.input, seed++);
  }
}

// A block that passes no gradient back (nothing with parameters before it) whose body starts with a
// layer without parameters. (`seq`'s CPU block op must stop its body's backward at the first conv.)
BOOST_AUTO_TEST_CASE(residual_block_first_with_a_body_that_starts_without_parameters) {
  check_residual_network("res[relu conv3x3:3/p1] relu conv3x3:8/p1 relu maxpool2 fc:10", {3, 16, 16}, 97);
  check_residual_network("maxpool2 res[relu conv3x3:6/p1 relu conv3x3:6/p1] fc:10", {3, 16, 16}, 98);
  check_residual_network("res[maxpool2 conv3x3:8/p1] relu fc:10", {1, 28, 28}, 99);
}

// The first conv3x3 + ReLU + maxpool2 of the cifar preset runs as the fused op conv_relu_pool,
// reading the uint8 data set and saving input patches since it is the first op: against the same
// layers one by one on the GPU (conv, relu, maxpool, nothing folded) and against seq, on CIFAR's
// 3x32x32 and on Fashion-MNIST's 1x28x28 (an odd 13x13 pool output after conv2). Behind a max-pool,
// the fused op reads the float activations instead.
BOOST_AUTO_TEST_CASE(fused_first_conv_pool_matches_layer_by_layer) {
  struct Case {
    const char* spec;
    cnn::TensorShape input;
  };
  for (const Case& c : {Case{"cifar", {3, 32, 32}}, Case{"cifar", {1, 28, 28}},
                        Case{"maxpool2 conv3x3:8 relu maxpool2 flatten fc:10", {3, 30, 30}}}) {
    const cnn::Network net = cnn::build_network(c.spec, 32, c.input, 10);
    const RandomData data = random_data(net.input, 300, 80, 55);
    const std::vector<cnn::Op> fused_ops = cnn::plan_ops(net, cnn::FusionTarget::kCuda);
    const Run fused = train("cuda", net, data, cnn::OptimizerKind::kAdam, 3, 64);
    const Run layers = train("cuda", net, data, cnn::OptimizerKind::kAdam, 3, 64, true, unfused_ops(net));
    const Run seq = train("seq", net, data, cnn::OptimizerKind::kAdam, 3, 64);
    BOOST_TEST_CONTEXT(c.spec << " on " << c.input.channels << "x" << c.input.height << "x" << c.input.width) {
      std::printf("%s on %dx%dx%d: %s vs %s\n", c.spec, c.input.channels, c.input.height, c.input.width,
                  fused.description.c_str(), layers.description.c_str());
      BOOST_TEST(fused_ops.at(fused_ops.front().name() == "maxpool" ? 1 : 0).name() == "conv_relu_pool");
      BOOST_TEST(fused.description.find(ops_text(fused_ops)) != std::string::npos, fused.description);
      BOOST_TEST(layers.description.find(ops_text(unfused_ops(net))) != std::string::npos, layers.description);
      BOOST_TEST(layers.description.find("conv_relu_pool") == std::string::npos);
      check_against(fused, layers, net, kStepTolerance);
      check_against(fused, seq, net, kStepTolerance);
    }
  }
}

// The seed model's whole-model op (conv_relu_pool_fc_softmax) against the layer ops it replaces:
// the fused conv_relu_pool reading the data set, then fc and the loss; and every layer on its own.
BOOST_AUTO_TEST_CASE(layer_ops_match_fused_seed_op) {
  for (int channels : {1, 3}) {
    cnn::SeedModel m;
    m.input = {channels, 28, 28};
    m.kernel = 3;
    m.filters = 32;
    m.classes = 10;
    const cnn::Network net = cnn::seed_network(m);
    const RandomData data = random_data(net.input, 400, 100, 53);
    const Run fused = train("cuda", net, data, cnn::OptimizerKind::kMomentum, 3, 100);
    const Run layers = train("cuda", net, data, cnn::OptimizerKind::kMomentum, 3, 100, true, seed_layer_ops(net));
    const Run unfused = train("cuda", net, data, cnn::OptimizerKind::kMomentum, 3, 100, true, unfused_ops(net));
    const Run seq = train("seq", net, data, cnn::OptimizerKind::kMomentum, 3, 100);
    BOOST_TEST_CONTEXT("seed, " << channels << " channel(s)") {
      std::printf("seed model, %d channel(s): %s and %s vs %s\n", channels, layers.description.c_str(),
                  unfused.description.c_str(), fused.description.c_str());
      BOOST_TEST(fused.description.find("ops conv_relu_pool_fc_softmax,") != std::string::npos, fused.description);
      BOOST_TEST(layers.description.find("ops conv_relu_pool fc softmax_cross_entropy,") != std::string::npos,
                 layers.description);
      BOOST_TEST(unfused.description.find("ops conv relu maxpool fc softmax_cross_entropy,") != std::string::npos,
                 unfused.description);
      check_against(layers, fused, net, kStepTolerance);
      check_against(unfused, fused, net, kStepTolerance);
      check_against(fused, seq, net, kStepTolerance);
    }
  }
}

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

std::vector<float> download_grads(cnn::Backend& gpu, std::int64_t total) {
  std::vector<float> got(static_cast<std::size_t>(total));
  gpu.synchronize();
  CNN_CHECK_CUDA(cudaMemcpy(got.data(), gpu.grads(), got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return got;
}

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

// ---- 5. measurement ---------------------------------------------------------------------------------

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

// A few eager steps per batch and precision (measured_precisions), for a kernel profiler:
//   ncu --clock-control none --print-summary per-kernel ./gpu_layers --run_test=profile_cifar_steps
BOOST_AUTO_TEST_CASE(profile_cifar_steps, *boost::unit_test::disabled() * boost::unit_test::label("measurement")) {
  const cnn::Network net = cnn::build_network("cifar", 32, {3, 32, 32}, 10);
  const RandomData data = random_data(net.input, 4096, 100, 99);
  for (const cnn::Precision precision : measured_precisions())
  for (std::int64_t batch : {512, 2048}) {
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
