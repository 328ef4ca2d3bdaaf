// Every CUDA kernel of the seed model's cuda backend against its CPU twin (include/cnn/ops.hpp), on
// fresh random data: the gathers (also with --augment), the fused conv_relu_pool forward (argmax
// mismatches only at near-ties), fc, softmax cross-entropy (also smoothed) and their backward passes;
// the optimizers' updates; the divergence check's first non-finite index and the update it gates;
// and the general path's fused head (fc_softmax: fc forward, loss, dL/dlogits and the masked input
// gradient in one kernel) against the same twins.
// The whole backend: gpu_backend.cpp, gpu_backend_randomness.cpp.
// With no usable GPU it prints "SKIP: ..." and exits with 77, which CTest reports as skipped.
#define BOOST_TEST_MODULE gpu_backend_kernels
#include "boost_test.hpp"

#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cnn/model.hpp"
#include "cnn/ops.hpp"
#include "cnn/optimizer.hpp"
#include "cnn/network.hpp"
#include "kernels/ops/cuda_ops.hpp"
#include "kernels/ops/layer_ops.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/ops/nonfinite.cuh"
#include "gpu_backend_checks.hpp"
#include "gpu_seed_fixtures.hpp"
#include "gpu_test_util.hpp"

namespace {

using namespace cnn::gpu_test;  // tests/gpu_test_util.hpp, gpu_seed_fixtures.hpp, gpu_backend_checks.hpp

struct RequireGpu {
  RequireGpu() { require_gpu(); }
};
BOOST_TEST_GLOBAL_FIXTURE(RequireGpu);

// ---- kernels against their CPU twins ----------------------------------------------------------

// The four conv outputs under a pool cell, in double: to tell a real argmax mismatch from a
// near-tie that fp32 summation order may resolve either way.
std::array<double, 4> conv_quad(const std::vector<float>& in, const std::vector<float>& w, const std::vector<float>& b,
                                const cnn::SeedModel& m, std::int64_t s, int f, int py, int px) {
  std::array<double, 4> z{};
  const int C = m.input.channels, H = m.input.height, W = m.input.width;
  for (int a = 0; a < 2; ++a)
    for (int bb = 0; bb < 2; ++bb) {
      double sum = b[f];
      for (int c = 0; c < C; ++c)
        for (int i = 0; i < 3; ++i)
          for (int j = 0; j < 3; ++j)
            sum += static_cast<double>(w[((f * C + c) * 3 + i) * 3 + j]) *
                   in[((s * C + c) * H + 2 * py + a + i) * W + 2 * px + bb + j];
      z[a * 2 + bb] = sum;
    }
  return z;
}

void check_layer_twins(const cnn::SeedModel& m, std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  cudaStream_t stream = nullptr;  // the legacy stream: to_host() synchronises the device
  const std::int64_t sample = m.input.size();
  const std::int64_t columns = m.fc_inputs();
  const int O = m.classes;
  const std::int64_t taps = static_cast<std::int64_t>(m.filters) * m.input.channels * 9;

  // gather: exact (the same division on both sides).
  const std::int64_t pool_size = 3 * n + 7;
  const auto images = random_bytes(rng, static_cast<std::size_t>(pool_size * sample), 256);
  const auto labels = random_bytes(rng, static_cast<std::size_t>(pool_size), O);
  std::vector<std::int32_t> indices(static_cast<std::size_t>(n));
  for (auto& i : indices) i = std::uniform_int_distribution<std::int32_t>(0, static_cast<std::int32_t>(pool_size - 1))(rng);
  std::vector<float> x_cpu(static_cast<std::size_t>(n * sample));
  std::vector<std::uint8_t> y_cpu(static_cast<std::size_t>(n));
  cnn::gather_normalize(x_cpu.data(), images.data(), indices.data(), n, sample);
  cnn::gather_labels(y_cpu.data(), labels.data(), indices.data(), n);
  auto d_images = to_device(images);
  auto d_labels = to_device(labels);
  auto d_indices = to_device(indices);
  auto d_x = poisoned<float>(n * sample);
  auto d_y = poisoned<std::uint8_t>(n);
  cnn::cuda::gather_normalize(d_x.get(), d_images.get(), d_indices.get(), n, sample, stream);
  cnn::cuda::gather_labels(d_y.get(), d_labels.get(), d_indices.get(), n, stream);
  BOOST_TEST((to_host(d_x) == x_cpu), "gather_normalize differs from the CPU twin");
  BOOST_TEST((to_host(d_y) == y_cpu), "gather_labels differs from the CPU twin");
  // gather_augment (--augment): the CPU's bits for the same step key and global-batch indices, the
  // origin read from device memory as a captured step reads it.
  for (const char* text : {"crop:4", "flip", "crop:3,flip", "crop:1,flip"}) {
    const cnn::Augment augment = cnn::parse_augment(text);
    const cnn::MaskOrigin origin{cnn::dropout_step_key(seed, 5), 37};
    cnn::gather_augment(x_cpu.data(), images.data(), indices.data(), n, m.input, augment, origin);
    auto d_origin = to_device(std::vector<cnn::MaskOrigin>{origin});
    cnn::cuda::gather_augment(d_x.get(), d_images.get(), d_indices.get(), n, m.input, augment, d_origin.get(), stream);
    BOOST_TEST((to_host(d_x) == x_cpu), "gather_augment " << text << " differs from the CPU twin");
  }

  // conv forward on continuous inputs (so that argmax ties are rare and detectable).
  const auto x = uniform(rng, static_cast<std::size_t>(n * sample), 0.0f, 1.0f);
  const auto conv_w = uniform(rng, static_cast<std::size_t>(taps), -0.35f, 0.35f);
  const auto conv_b = uniform(rng, static_cast<std::size_t>(m.filters), -0.2f, 0.2f);
  std::vector<float> pooled_cpu(static_cast<std::size_t>(n * columns));
  std::vector<std::uint8_t> argmax_cpu(pooled_cpu.size());
  cnn::conv_relu_pool_forward(pooled_cpu.data(), argmax_cpu.data(), x.data(), conv_w.data(), conv_b.data(), n, m);
  auto d_in = to_device(x);
  auto d_conv_w = to_device(conv_w);
  auto d_conv_b = to_device(conv_b);
  auto d_pooled = poisoned<float>(n * columns);
  auto d_argmax = poisoned<std::uint8_t>(n * columns);
  cnn::cuda::conv_relu_pool_forward(d_pooled.get(), d_argmax.get(), d_in.get(), d_conv_w.get(), d_conv_b.get(), n, m,
                                    stream);
  CHECK_CLOSE_REL(to_host(d_pooled), pooled_cpu, "conv_relu_pool_forward pooled");
  {
    // argmax matters only where the ReLU passed (elsewhere no gradient flows through it).
    const auto argmax_gpu = to_host(d_argmax);
    const int P = m.pooled().height * m.pooled().width;
    std::int64_t live = 0, near_ties = 0, real_mismatches = 0;
    for (std::int64_t e = 0; e < n * columns; ++e) {
      if (pooled_cpu[static_cast<std::size_t>(e)] <= 0.0f) continue;
      ++live;
      if (argmax_gpu[static_cast<std::size_t>(e)] == argmax_cpu[static_cast<std::size_t>(e)]) continue;
      const std::int64_t s = e / columns;
      const int f = static_cast<int>((e % columns) / P);
      const int cell = static_cast<int>(e % P);
      const auto z = conv_quad(x, conv_w, conv_b, m, s, f, cell / m.pooled().width, cell % m.pooled().width);
      const double gap = std::fabs(z[argmax_gpu[static_cast<std::size_t>(e)] & 3] - z[argmax_cpu[static_cast<std::size_t>(e)]]);
      if (argmax_gpu[static_cast<std::size_t>(e)] < 4 && gap <= 1e-5 * (1.0 + std::fabs(z[argmax_cpu[static_cast<std::size_t>(e)]])))
        ++near_ties;
      else
        ++real_mismatches;
    }
    BOOST_TEST(real_mismatches == 0, "conv argmax: " << real_mismatches << " mismatches of " << live
                                                     << " live cells that are not near-ties");
    BOOST_TEST(near_ties * 10000 <= live, "conv argmax: too many near-ties (" << near_ties << ")");
  }

  // fc forward on the CPU's pooled values (each kernel checked on its own inputs).
  const auto fc_w = uniform(rng, static_cast<std::size_t>(O * columns), -0.05f, 0.05f);
  const auto fc_b = uniform(rng, static_cast<std::size_t>(O), -0.1f, 0.1f);
  std::vector<float> logits_cpu(static_cast<std::size_t>(n * O));
  cnn::fc_forward(logits_cpu.data(), pooled_cpu.data(), fc_w.data(), fc_b.data(), n, columns, O);
  auto d_pooled_cpu = to_device(pooled_cpu);
  auto d_argmax_cpu = to_device(argmax_cpu);
  auto d_fc_w = to_device(fc_w);
  auto d_fc_b = to_device(fc_b);
  auto d_logits = poisoned<float>(n * O);
  cnn::cuda::fc_forward(d_logits.get(), d_pooled_cpu.get(), d_fc_w.get(), d_fc_b.get(), n, columns, O, stream);
  CHECK_CLOSE_REL(to_host(d_logits), logits_cpu, "fc_forward");

  // softmax cross-entropy.
  const auto softmax_labels = random_bytes(rng, static_cast<std::size_t>(n), O);
  std::vector<float> grad_logits_cpu(static_cast<std::size_t>(n * O));
  double loss_cpu = 1.5;
  std::int64_t correct_cpu = 3;
  cnn::softmax_cross_entropy(grad_logits_cpu.data(), &loss_cpu, &correct_cpu, logits_cpu.data(), softmax_labels.data(),
                             n, O, 0.0f);
  auto d_logits_cpu = to_device(logits_cpu);
  auto d_softmax_labels = to_device(softmax_labels);
  auto d_grad_logits = poisoned<float>(n * O);
  auto d_loss = to_device(std::vector<double>{1.5});
  auto d_correct = to_device(std::vector<std::int64_t>{3});
  cnn::cuda::softmax_cross_entropy(d_grad_logits.get(), d_loss.get(), d_correct.get(), d_logits_cpu.get(),
                                   d_softmax_labels.get(), n, O, 0.0f, stream);
  CHECK_CLOSE_REL(to_host(d_grad_logits), grad_logits_cpu, "softmax_cross_entropy gradient");
  const double loss_gpu = to_host(d_loss)[0];
  BOOST_TEST(std::fabs(loss_gpu - loss_cpu) <= kTolerance * std::fabs(loss_cpu),
             "softmax loss sum " << loss_gpu << " vs " << loss_cpu);
  BOOST_TEST(to_host(d_correct)[0] == correct_cpu);
  // With label smoothing (--label-smoothing): the smoothed loss and its gradient, twin against twin.
  std::vector<float> smoothed_grad_cpu(static_cast<std::size_t>(n * O));
  double smoothed_loss_cpu = 0.0;
  std::int64_t smoothed_correct_cpu = 0;
  cnn::softmax_cross_entropy(smoothed_grad_cpu.data(), &smoothed_loss_cpu, &smoothed_correct_cpu, logits_cpu.data(),
                             softmax_labels.data(), n, O, 0.15f);
  auto d_smoothed_loss = to_device(std::vector<double>{0.0});
  auto d_smoothed_correct = to_device(std::vector<std::int64_t>{0});
  cnn::cuda::softmax_cross_entropy(d_grad_logits.get(), d_smoothed_loss.get(), d_smoothed_correct.get(),
                                   d_logits_cpu.get(), d_softmax_labels.get(), n, O, 0.15f, stream);
  CHECK_CLOSE_REL(to_host(d_grad_logits), smoothed_grad_cpu, "smoothed softmax_cross_entropy gradient");
  BOOST_TEST(std::fabs(to_host(d_smoothed_loss)[0] - smoothed_loss_cpu) <= kTolerance * std::fabs(smoothed_loss_cpu),
             "smoothed loss sum " << to_host(d_smoothed_loss)[0] << " vs " << smoothed_loss_cpu);
  BOOST_TEST(to_host(d_smoothed_correct)[0] == smoothed_correct_cpu);

  // fc backward: gradients accumulate (+=) into random starting values.
  const auto grad_out = uniform(rng, static_cast<std::size_t>(n * O), -1.0f, 1.0f);
  const auto fc_gw0 = uniform(rng, fc_w.size(), -1.0f, 1.0f);
  const auto fc_gb0 = uniform(rng, fc_b.size(), -1.0f, 1.0f);
  std::vector<float> grad_in_cpu(static_cast<std::size_t>(n * columns)), fc_gw_cpu = fc_gw0, fc_gb_cpu = fc_gb0;
  cnn::fc_backward(grad_in_cpu.data(), fc_gw_cpu.data(), fc_gb_cpu.data(), grad_out.data(), pooled_cpu.data(),
                   fc_w.data(), n, columns, O);
  auto d_grad_out = to_device(grad_out);
  auto d_grad_in = poisoned<float>(n * columns);
  auto d_fc_gw = to_device(fc_gw0);
  auto d_fc_gb = to_device(fc_gb0);
  cnn::cuda::fc_backward(d_grad_in.get(), d_fc_gw.get(), d_fc_gb.get(), d_grad_out.get(), d_pooled_cpu.get(),
                         d_fc_w.get(), n, columns, O, stream);
  CHECK_CLOSE_REL(to_host(d_grad_in), grad_in_cpu, "fc_backward grad_in");
  CHECK_CLOSE_REL(to_host(d_fc_gw), fc_gw_cpu, "fc_backward grad_weight");
  CHECK_CLOSE_REL(to_host(d_fc_gb), fc_gb_cpu, "fc_backward grad_bias");
  // Without grad_in (the first layer's case), the weight gradients are the same.
  auto d_fc_gw2 = to_device(fc_gw0);
  auto d_fc_gb2 = to_device(fc_gb0);
  cnn::cuda::fc_backward(nullptr, d_fc_gw2.get(), d_fc_gb2.get(), d_grad_out.get(), d_pooled_cpu.get(), d_fc_w.get(), n,
                         columns, O, stream);
  CHECK_CLOSE_REL(to_host(d_fc_gw2), fc_gw_cpu, "fc_backward grad_weight (no grad_in)");

  // conv backward on the CPU's pooled values and argmax, with a random upstream gradient.
  const auto grad_pooled = uniform(rng, static_cast<std::size_t>(n * columns), -1.0f, 1.0f);
  const auto conv_gw0 = uniform(rng, conv_w.size(), -1.0f, 1.0f);
  const auto conv_gb0 = uniform(rng, conv_b.size(), -1.0f, 1.0f);
  std::vector<float> conv_gw_cpu = conv_gw0, conv_gb_cpu = conv_gb0;
  cnn::conv_relu_pool_backward(conv_gw_cpu.data(), conv_gb_cpu.data(), grad_pooled.data(), pooled_cpu.data(),
                               argmax_cpu.data(), x.data(), n, m);
  auto d_grad_pooled = to_device(grad_pooled);
  auto d_conv_gw = to_device(conv_gw0);
  auto d_conv_gb = to_device(conv_gb0);
  cnn::cuda::conv_relu_pool_backward(d_conv_gw.get(), d_conv_gb.get(), d_grad_pooled.get(), d_pooled_cpu.get(),
                                     d_argmax_cpu.get(), d_in.get(), n, m, stream);
  CHECK_CLOSE_REL(to_host(d_conv_gw), conv_gw_cpu, "conv_relu_pool_backward grad_weight");
  CHECK_CLOSE_REL(to_host(d_conv_gb), conv_gb_cpu, "conv_relu_pool_backward grad_bias");
}

// The fc_softmax kernel (kernels/ops/fc_softmax.cu, fp32 outputs) against fc_forward,
// softmax_cross_entropy and fc_backward's input gradient on the CPU, that gradient zeroed where the
// input (a ReLU's output) is <= 0: logits, per-sample losses and hits (summed here), dL/dlogits and
// the input gradient; inputs that fill whole warps' strides (64, 1024) and that do not (100), a batch
// smaller than a block's warps (5) and one of many (300), with and without label smoothing.
void check_fused_head(std::int64_t n, int inputs, float label_smoothing, std::mt19937& rng) {
  constexpr int O = 10;
  const std::string what = "fc_softmax, batch " + std::to_string(n) + ", " + std::to_string(inputs) +
                           " inputs, smoothing " + std::to_string(label_smoothing);
  auto in = uniform(rng, static_cast<std::size_t>(n * inputs), -1.0f, 1.0f);
  for (std::size_t i = 0; i < in.size(); i += 3) in[i] = 0.0f;  // a ReLU's zeros, some of them exact
  const auto weight = uniform(rng, static_cast<std::size_t>(O * inputs), -0.1f, 0.1f);
  const auto bias = uniform(rng, O, -0.1f, 0.1f);
  const auto labels = random_bytes(rng, static_cast<std::size_t>(n), O);
  std::vector<float> logits_cpu(static_cast<std::size_t>(n * O)), grad_logits_cpu(logits_cpu.size());
  cnn::fc_forward(logits_cpu.data(), in.data(), weight.data(), bias.data(), n, inputs, O);
  double loss_cpu = 0.0;
  std::int64_t correct_cpu = 0;
  cnn::softmax_cross_entropy(grad_logits_cpu.data(), &loss_cpu, &correct_cpu, logits_cpu.data(), labels.data(), n, O,
                             label_smoothing);
  std::vector<float> grad_in_cpu(static_cast<std::size_t>(n * inputs)), unused_gw(weight.size()), unused_gb(O);
  cnn::fc_backward(grad_in_cpu.data(), unused_gw.data(), unused_gb.data(), grad_logits_cpu.data(), in.data(),
                   weight.data(), n, inputs, O);
  for (std::size_t i = 0; i < in.size(); ++i)
    if (!(in[i] > 0.0f)) grad_in_cpu[i] = 0.0f;

  const auto d_in = to_device(in), d_weight = to_device(weight), d_bias = to_device(bias);
  const auto d_labels = to_device(labels);
  auto d_logits = poisoned<float>(n * O), d_grad_logits = poisoned<float>(n * O), d_loss = poisoned<float>(n);
  auto d_correct = poisoned<int>(n);
  auto d_grad_in = poisoned<float>(n * inputs);
  cnn::cuda::FcSoftmaxTensors t;
  t.in = d_in.get();
  t.weight = d_weight.get();
  t.bias = d_bias.get();
  t.labels = d_labels.get();
  t.logits = d_logits.get();
  t.grad_logits = d_grad_logits.get();
  t.grad_in = d_grad_in.get();
  t.mask_relu = true;
  t.sample_loss = d_loss.get();
  t.sample_correct = d_correct.get();
  cnn::cuda::fc_softmax_cross_entropy(t, n, inputs, label_smoothing, nullptr);
  CNN_CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CLOSE_REL(to_host(d_logits), logits_cpu, what + ": logits");
  CHECK_CLOSE_REL(to_host(d_grad_logits), grad_logits_cpu, what + ": dL/dlogits");
  CHECK_CLOSE_REL(to_host(d_grad_in), grad_in_cpu, what + ": masked input gradient");
  double loss_gpu = 0.0;
  for (const float l : to_host(d_loss)) loss_gpu += l;
  std::int64_t correct_gpu = 0;
  for (const int c : to_host(d_correct)) correct_gpu += c;
  BOOST_TEST(std::fabs(loss_gpu - loss_cpu) <= kTolerance * std::fabs(loss_cpu),
             what << ": loss sum " << loss_gpu << " vs " << loss_cpu);
  BOOST_TEST(correct_gpu == correct_cpu, what << ": hits");
}

BOOST_AUTO_TEST_CASE(fused_head_kernel_matches_cpu_twins) {
  std::mt19937 rng(2026);
  for (const std::int64_t n : {5, 300})
    for (const int inputs : {64, 100, 1024})
      for (const float label_smoothing : {0.0f, 0.15f}) check_fused_head(n, inputs, label_smoothing, rng);
}

BOOST_AUTO_TEST_CASE(layer_kernels_match_cpu_twins) {
  std::uint32_t seed = 1;
  for (int filters : {32, 64, 256})
    for (std::int64_t n : {1, 37, 200}) {
      BOOST_TEST_CONTEXT("d=" << filters << " n=" << n) { check_layer_twins(seed_model(filters), n, seed++); }
    }
  // The seed CNN on CIFAR-10's 3x32x32 images.
  BOOST_TEST_CONTEXT("3 channels, d=32, n=50") { check_layer_twins(seed_model(32, 3, 32), 50, seed++); }
}

BOOST_AUTO_TEST_CASE(optimizer_kernels_match_cpu_twins) {
  std::mt19937 rng(7);
  const std::size_t n = 100003;
  const auto params = uniform(rng, n, -1.0f, 1.0f);
  const auto grads = uniform(rng, n, -50.0f, 50.0f);
  const auto velocity = uniform(rng, n, -0.1f, 0.1f);
  auto d_g = to_device(grads);
  // Without and with --weight-decay, and momentum with and without --nesterov.
  for (const float decay : {0.0f, 0.01f}) {
    BOOST_TEST_CONTEXT("weight decay " << decay) {
      std::vector<float> p_cpu = params;
      cnn::sgd_update(p_cpu.data(), grads.data(), static_cast<std::int64_t>(n), 0.1f, decay, 1.0f / 1000);
      auto d_p = to_device(params);
      cnn::cuda::sgd_update(d_p.get(), d_g.get(), static_cast<std::int64_t>(n), 0.1f, decay, 1.0f / 1000, nullptr);
      CHECK_CLOSE_REL(to_host(d_p), p_cpu, "sgd_update");
      for (const bool nesterov : {false, true}) {
        std::vector<float> pm_cpu = params, v_cpu = velocity;
        cnn::momentum_update(pm_cpu.data(), v_cpu.data(), grads.data(), static_cast<std::int64_t>(n), 0.1f, 0.9f, decay,
                             nesterov, 1.0f / 1000);
        auto d_pm = to_device(params);
        auto d_v = to_device(velocity);
        cnn::cuda::momentum_update(d_pm.get(), d_v.get(), d_g.get(), static_cast<std::int64_t>(n), 0.1f, 0.9f, decay,
                                   nesterov, 1.0f / 1000, nullptr);
        CHECK_CLOSE_REL(to_host(d_pm), pm_cpu, "momentum_update params, nesterov " << nesterov);
        CHECK_CLOSE_REL(to_host(d_v), v_cpu, "momentum_update velocity, nesterov " << nesterov);
      }
    }
  }
}

// The divergence check (kernels/ops/nonfinite.cu): the first non-finite index wherever it lies, and the
// deferred check's device word leaving every optimizer's update undone, bit for bit.
BOOST_AUTO_TEST_CASE(nonfinite_check_finds_the_first_and_gates_the_update) {
  cudaStream_t stream = nullptr;  // the legacy stream: to_host() synchronises the device
  const std::int64_t n = 100003;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> finite(static_cast<std::size_t>(n), 0.5f);
  BOOST_TEST(cnn::cuda::first_nonfinite(to_device(finite).get(), n, stream) == -1);
  for (std::int64_t at : {std::int64_t{0}, std::int64_t{1}, std::int64_t{4095}, std::int64_t{50000}, n - 1})
    for (float bad : {nan, inf, -inf}) {
      std::vector<float> g = finite;
      g[static_cast<std::size_t>(at)] = bad;
      g[static_cast<std::size_t>(n - 1)] = nan;  // a later one must not win
      BOOST_TEST(cnn::cuda::first_nonfinite(to_device(g).get(), n, stream) == at, "at " << at << " value " << bad);
    }

  std::mt19937 rng(11);
  const auto params = uniform(rng, static_cast<std::size_t>(n), -1.0f, 1.0f);
  const auto state = uniform(rng, static_cast<std::size_t>(2 * n), 0.0f, 0.1f);  // Adam's v must be >= 0
  const auto grads = uniform(rng, static_cast<std::size_t>(n), -5.0f, 5.0f);
  std::vector<float> bad_grads = grads;
  bad_grads[777] = nan;
  cnn::cuda::DeferredNonFiniteCheck check(stream);
  BOOST_TEST(check.result() == -1);  // nothing enqueued yet
  for (cnn::OptimizerKind kind : {cnn::OptimizerKind::kSgd, cnn::OptimizerKind::kMomentum, cnn::OptimizerKind::kAdam,
                                  cnn::OptimizerKind::kAdamW}) {
    BOOST_TEST_CONTEXT(cnn::optimizer_name(kind)) {
      cnn::OptimizerSettings settings;
      settings.kind = kind;
      settings.step = 3;
      auto d_p = to_device(params);
      auto d_s = to_device(state);
      auto d_bad = to_device(bad_grads);
      check.enqueue(d_bad.get(), n, stream);
      cnn::cuda::apply_optimizer(settings, d_p.get(), d_s.get(), d_bad.get(), n, 0.01f, stream, check.skip_flag());
      BOOST_TEST(check.result() == 777);
      BOOST_TEST((to_host(d_p) == params), "a flagged step changed the parameters");
      BOOST_TEST((to_host(d_s) == state), "a flagged step changed the optimizer state");

      auto d_g = to_device(grads);
      check.enqueue(d_g.get(), n, stream);
      cnn::cuda::apply_optimizer(settings, d_p.get(), d_s.get(), d_g.get(), n, 0.01f, stream, check.skip_flag());
      BOOST_TEST(check.result() == -1);
      std::vector<float> p_cpu = params, s_cpu = state;
      cnn::apply_optimizer(settings, p_cpu.data(), s_cpu.data(), grads.data(), n, 0, n, 0.01f);
      CHECK_CLOSE_REL(to_host(d_p), p_cpu, "finite step after a flagged one: params");
      if (kind != cnn::OptimizerKind::kSgd) CHECK_CLOSE_REL(to_host(d_s), s_cpu, "finite step: optimizer state");
    }
  }
}

}  // namespace
