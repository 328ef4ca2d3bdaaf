// Finite-difference check of every parameter group of the seed CNN: the analytic gradients of
// conv_relu_pool_backward / fc_backward / softmax_cross_entropy against central differences of the
// forward loss. As in Caffe's GradientChecker, coordinates where the perturbation crosses a kink
// (a ReLU or a max-pool winner changes) are skipped: there the loss is not differentiable.
// And the same fused op as the first of several conv layers, through the `threads` backend; and the
// loss with label smoothing against PyTorch's definition, and its gradient against finite differences.
#define BOOST_TEST_MODULE gradients
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "boost_test.hpp"
#include "cnn/cpu_backend.hpp"
#include "cnn/network.hpp"
#include "cnn/ops.hpp"
#include "test_util.hpp"

namespace {

using cnn::SeedModel;

struct Net {
  SeedModel model;
  cnn::ParamLayout layout;
  std::vector<float> input;          // [n, C, H, W]
  std::vector<std::uint8_t> labels;  // [n]
  std::int64_t n;
  float label_smoothing = 0.0f;

  const float* at(const std::vector<float>& params, int view) const {
    return params.data() + layout.views()[static_cast<std::size_t>(view)].offset;
  }

  // Forward to the mean loss; also returns the activation pattern (argmax and ReLU signs) so a
  // perturbation that changes it can be detected.
  double loss(const std::vector<float>& params, std::vector<std::uint8_t>* pattern = nullptr) const {
    const std::int64_t cells = model.pooled().size();
    std::vector<float> pooled(static_cast<std::size_t>(n * cells)), logits(static_cast<std::size_t>(n * model.classes));
    std::vector<std::uint8_t> argmax(static_cast<std::size_t>(n * cells));
    cnn::conv_relu_pool_forward(pooled.data(), argmax.data(), input.data(), at(params, 0), at(params, 1), n, model);
    cnn::fc_forward(logits.data(), pooled.data(), at(params, 2), at(params, 3), n, model.fc_inputs(), model.classes);
    double sum = 0.0;
    std::int64_t correct = 0;
    cnn::softmax_cross_entropy(nullptr, &sum, &correct, logits.data(), labels.data(), n, model.classes,
                               label_smoothing);
    if (pattern != nullptr) {
      pattern->assign(argmax.begin(), argmax.end());
      for (float p : pooled) pattern->push_back(p > 0.0f ? 1 : 0);
    }
    return sum / static_cast<double>(n);
  }

  // Analytic gradient of the mean loss.
  std::vector<float> gradient(const std::vector<float>& params) const {
    const std::int64_t cells = model.pooled().size();
    std::vector<float> pooled(static_cast<std::size_t>(n * cells)), logits(static_cast<std::size_t>(n * model.classes));
    std::vector<float> grad_logits(logits.size()), grad_pooled(pooled.size());
    std::vector<std::uint8_t> argmax(static_cast<std::size_t>(n * cells));
    std::vector<float> grads(static_cast<std::size_t>(layout.total()), 0.0f);
    cnn::conv_relu_pool_forward(pooled.data(), argmax.data(), input.data(), at(params, 0), at(params, 1), n, model);
    cnn::fc_forward(logits.data(), pooled.data(), at(params, 2), at(params, 3), n, model.fc_inputs(), model.classes);
    double sum = 0.0;
    std::int64_t correct = 0;
    cnn::softmax_cross_entropy(grad_logits.data(), &sum, &correct, logits.data(), labels.data(), n, model.classes,
                               label_smoothing);
    auto view = [&](int v) { return grads.data() + layout.views()[static_cast<std::size_t>(v)].offset; };
    cnn::fc_backward(grad_pooled.data(), view(2), view(3), grad_logits.data(), pooled.data(), at(params, 2), n,
                     model.fc_inputs(), model.classes);
    cnn::conv_relu_pool_backward(view(0), view(1), grad_pooled.data(), pooled.data(), argmax.data(), input.data(), n,
                                 model);
    for (float& g : grads) g /= static_cast<float>(n);  // the sum over samples -> the mean
    return grads;
  }
};

Net make_net(int filters, cnn::TensorShape shape, std::int64_t n, std::uint32_t seed) {
  Net net;
  net.model.input = shape;
  net.model.filters = filters;
  net.model.classes = 10;
  net.layout = net.model.layout();
  net.n = n;
  const cnn::Dataset data = cnn::test::random_dataset(n, shape, seed);
  net.input.resize(static_cast<std::size_t>(n * shape.size()));
  for (std::size_t i = 0; i < net.input.size(); ++i) net.input[i] = data.images[i] / 255.0f;
  net.labels = data.labels;
  return net;
}

void check_every_parameter(const Net& net, std::uint32_t seed) {
  std::vector<float> params(static_cast<std::size_t>(net.layout.total()));
  cnn::initialize_params(params.data(), net.layout, seed);
  const std::vector<float> analytic = net.gradient(params);
  std::vector<std::uint8_t> base_pattern;
  net.loss(params, &base_pattern);
  const float step = 1e-3f;
  for (const cnn::ParamView& view : net.layout.views()) {
    int checked = 0, skipped = 0;
    double worst = 0.0;
    for (std::int64_t i = 0; i < view.size; ++i) {
      const std::size_t index = static_cast<std::size_t>(view.offset + i);
      std::vector<float> plus = params, minus = params;
      plus[index] += step;
      minus[index] -= step;
      std::vector<std::uint8_t> pattern_plus, pattern_minus;
      const double up = net.loss(plus, &pattern_plus), down = net.loss(minus, &pattern_minus);
      if (pattern_plus != base_pattern || pattern_minus != base_pattern) {
        ++skipped;  // crossed a kink of ReLU or max: no derivative to compare with
        continue;
      }
      const double numeric = (up - down) / (2.0 * step);
      const double error = std::fabs(numeric - analytic[index]);
      worst = std::max(worst, error / (1e-3 + std::fabs(numeric)));
      BOOST_TEST(error <= 3e-4 + 2e-2 * std::fabs(numeric),
                 view.name() << "[" << i << "]: analytic " << analytic[index] << " vs numeric " << numeric);
      ++checked;
    }
    BOOST_TEST_MESSAGE(view.name() << ": " << checked << " checked, " << skipped << " skipped at kinks, worst scaled error "
                                   << worst);
    BOOST_TEST(checked >= view.size * 3 / 4, view.name() << ": too many coordinates at kinks");
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(seed_model_every_parameter_group) {
  check_every_parameter(make_net(4, {1, 10, 10}, 3, 11), 5);
}

BOOST_AUTO_TEST_CASE(seed_model_every_parameter_group_with_label_smoothing) {
  Net net = make_net(4, {1, 10, 10}, 3, 11);
  net.label_smoothing = 0.2f;
  check_every_parameter(net, 5);
}

// torch.nn.CrossEntropyLoss(label_smoothing=S): -sum_k q_k log softmax(z)_k with q = (1-S) onehot + S/K,
// in double, against the float loss; and its gradient softmax(z) - q against central differences of it.
BOOST_AUTO_TEST_CASE(label_smoothing_loss_is_torchs_and_its_gradient_matches_finite_differences) {
  constexpr int kClasses = 7;
  constexpr std::int64_t kSamples = 5;
  std::vector<float> logits(kSamples * kClasses);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = 3.0f * std::sin(0.7f * static_cast<float>(i) + 0.3f);
  logits[3] = 40.0f;  // a dominant logit: the max shift must keep the smoothed loss finite and exact
  const std::vector<std::uint8_t> labels = {0, 6, 3, 2, 0};
  const auto torch_loss = [&](const std::vector<double>& z, std::int64_t s, double smoothing) {
    double top = z[0];
    for (double v : z) top = std::max(top, v);
    double denominator = 0.0;
    for (double v : z) denominator += std::exp(v - top);
    double loss = 0.0;
    for (int k = 0; k < kClasses; ++k) {
      const double q = (k == labels[static_cast<std::size_t>(s)] ? 1.0 - smoothing : 0.0) + smoothing / kClasses;
      loss -= q * (z[static_cast<std::size_t>(k)] - top - std::log(denominator));
    }
    return loss;
  };
  for (const float smoothing : {0.0f, 0.1f, 0.5f, 1.0f}) {
    BOOST_TEST_CONTEXT("label smoothing " << smoothing) {
      std::vector<float> grad(logits.size());
      double loss = 0.0;
      std::int64_t correct = 0;
      cnn::softmax_cross_entropy(grad.data(), &loss, &correct, logits.data(), labels.data(), kSamples, kClasses,
                                 smoothing);
      double expected = 0.0;
      for (std::int64_t s = 0; s < kSamples; ++s) {
        std::vector<double> z(logits.begin() + s * kClasses, logits.begin() + (s + 1) * kClasses);
        expected += torch_loss(z, s, smoothing);
        for (int k = 0; k < kClasses; ++k) {
          const double h = 1e-4;
          std::vector<double> up = z, down = z;
          up[static_cast<std::size_t>(k)] += h;
          down[static_cast<std::size_t>(k)] -= h;
          const double numeric = (torch_loss(up, s, smoothing) - torch_loss(down, s, smoothing)) / (2 * h);
          BOOST_TEST(std::fabs(grad[static_cast<std::size_t>(s * kClasses + k)] - numeric) <= 1e-5,
                     "sample " << s << " class " << k << ": " << grad[static_cast<std::size_t>(s * kClasses + k)]
                               << " vs " << numeric);
        }
      }
      BOOST_TEST(std::fabs(loss - expected) <= 1e-5 * std::max(1.0, std::fabs(expected)),
                 "loss " << loss << " vs torch's " << expected);
    }
  }
}

BOOST_AUTO_TEST_CASE(seed_model_odd_sizes_and_filters_not_a_vector_multiple) {
  // 11x11 input: conv 9x9, pool 4x4 (the last conv row and column never reach a pool cell).
  check_every_parameter(make_net(5, {1, 11, 11}, 2, 12), 6);
}

BOOST_AUTO_TEST_CASE(seed_model_multi_channel_input) {
  check_every_parameter(make_net(3, {2, 8, 8}, 2, 13), 7);
}

// The CPU plan runs conv_relu_pool for the first conv and the plain ops after it: its weight gradient
// reaches the backend's buffer through the layers above it. Analytic gradients from
// compute_gradients, numeric ones from evaluate's loss (the same fused forward); a step across a
// ReLU or pool kink shows as one-sided slopes that disagree, and is skipped.
namespace {

// A backend's gradient of one batch's summed loss (every sample of data, in order) at parameters
// initialised from `seed`, and that loss again at whatever params then holds: the two sides of a
// finite-difference check through a whole backend.
struct GradientProbe {
  GradientProbe(const cnn::Network& net, const cnn::Dataset& data, const cnn::BackendOptions& options,
                std::uint32_t seed)
      : backend(cnn::make_cpu_backend(net, options)),
        params(static_cast<std::size_t>(net.layout.total())),
        samples(data.count()) {
    backend->bind_data(data, data);
    backend->set_step_randomness({seed, 3, 0});  // dropout's masks: those of step 3 of a run seeded `seed`
    cnn::initialize_params(params.data(), net.layout, seed);
    std::vector<std::int32_t> order(static_cast<std::size_t>(samples));
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
    backend->upload_params(params);
    backend->begin_epoch(order);
    backend->compute_gradients(0, samples);
    analytic.assign(backend->grads(), backend->grads() + net.layout.total());
    backend->take_train_stats();
  }

  // Evaluation's loss, or with training_loss the training step's, whose dropout layers drop (the same
  // masks at every call: the step's randomness stays).
  double loss() {
    backend->upload_params(params);
    if (!training_loss) return backend->evaluate(0, samples).loss_sum;
    backend->compute_gradients(0, samples);
    return backend->take_train_stats().loss_sum;
  }

  bool training_loss = false;

  std::unique_ptr<cnn::Backend> backend;
  std::vector<float> params;    // change a coordinate, then loss()
  std::vector<float> analytic;  // compute_gradients at the initial parameters
  std::int64_t samples;
};

}  // namespace

BOOST_AUTO_TEST_CASE(fused_first_layer_under_more_convs_through_the_threads_backend) {
  const cnn::Dataset data = cnn::test::random_dataset(6, {2, 12, 12}, 14, 4);
  const cnn::Network net = cnn::build_network("conv3x3:4 relu maxpool2 conv3x3:5 relu maxpool2 fc:6 relu fc:4", 0,
                                              data.shape, 4);  // 10 -> 5 -> 3 -> 1
  cnn::BackendOptions options;
  options.kind = cnn::BackendKind::kThreads;
  options.threads = 2;
  GradientProbe probe(net, data, options, 19);
  BOOST_TEST_REQUIRE(probe.backend->device_description().find("ops conv_relu_pool conv relu maxpool") !=
                     std::string::npos);
  std::vector<float>& params = probe.params;
  const std::vector<float>& analytic = probe.analytic;
  auto loss = [&] { return probe.loss(); };
  const float h = 1e-3f;  // small: a step moves every pre-activation the weight feeds
  for (const cnn::ParamView& view : net.layout.views()) {
    int checked = 0, kinks = 0, skew_caught = 0;
    for (std::int64_t i = 0; i < view.size; ++i) {
      float& x = params[static_cast<std::size_t>(view.offset + i)];
      const float saved = x;
      const double center = loss();
      x = saved + h;
      const double up = loss();
      x = saved - h;
      const double down = loss();
      x = saved;
      const double right = (up - center) / h, left = (center - down) / h;
      if (std::fabs(right - left) > 0.02 * std::max(1e-2, std::fabs(right) + std::fabs(left))) {
        ++kinks;
        continue;
      }
      const double numeric = (up - down) / (2.0 * h), g = analytic[static_cast<std::size_t>(view.offset + i)];
      const auto close = [&](double a) {
        return std::fabs(a - numeric) <= 3e-2 * std::max(1e-2, std::max(std::fabs(a), std::fabs(numeric)));
      };
      BOOST_TEST(close(g), view.name() << "[" << i << "]: analytic " << g << " vs numeric " << numeric);
      skew_caught += close(1.05 * g) ? 0 : 1;
      ++checked;
    }
    BOOST_TEST_MESSAGE(view.name() << ": " << checked << " checked, " << kinks << " skipped at kinks, a 5% error caught at "
                                   << skew_caught);
    BOOST_TEST(checked >= view.size * 3 / 4, view.name() << ": too many coordinates at kinks");
    // The check can see an error: the fused op's weight gradient 5% too large fails it.
    if (view.name() == "conv1.weight") BOOST_TEST(skew_caught >= checked / 2);
  }
}

// ---- residual blocks (res[...]) through the `seq` backend

namespace {

// How a network's gradient check is run: the batch, the steps, and the tolerances.
struct GradientCheck {
  std::int64_t samples = 3;
  bool smooth = false;        // no ReLU or max-pool: no kinks, one step of 1e-2 for every coordinate
  double element_rel = 2e-2;  // each coordinate: |analytic - numeric| <= rel * |numeric| + noise(h, samples)
  double view_rel = 1e-2;     // each view: ||analytic - numeric|| / ||numeric|| over its checked coordinates
  bool training_loss = false; // differentiate the training step's loss (dropout on), not evaluation's
};

// The finite-difference steps, largest first (least float noise), and the noise of a difference
// quotient of the float loss at that step: 3e-5 at 1e-2 for a batch of 3 (measured: ~1e-5), growing
// as 1 / h and with the batch, since the loss is the batch's sum (its rounding grows with it: a bias
// right before a bn, whose gradient is exactly 0, read -4.2e-5 at 1e-2 with 8 samples in the AVX2
// tree).
constexpr float kSteps[] = {1e-2f, 2e-3f, 5e-4f};
double noise(float h, std::int64_t samples) {
  return 3e-5 * (1e-2 / static_cast<double>(h)) * std::max(1.0, static_cast<double>(samples) / 3.0);
}

// Central differences of the backend's evaluate loss (the sum over the batch) against the gradient of
// compute_gradients (the same sum), every coordinate of every view. Where the four slopes over
// [x - h, x + h] in steps of h/2 disagree, the step crossed a ReLU or max-pool kink: the next smaller
// step is tried, and a coordinate with a kink at every step is skipped. Each coordinate must agree to
// element_rel (plus the noise of its step), and each view as a whole to view_rel (plus that noise
// over the view's norm): a gradient that misses a branch's share or has a wrong sign is off by far more.
void check_network_gradients(const std::string& spec, cnn::TensorShape shape, std::uint32_t seed,
                             const GradientCheck& check) {
  const int classes = 4;
  const cnn::Dataset data = cnn::test::random_dataset(check.samples, shape, seed, classes);
  const cnn::Network net = cnn::build_network(spec, 0, data.shape, classes);
  BOOST_TEST_MESSAGE(net.describe());
  cnn::BackendOptions options;
  options.kind = cnn::BackendKind::kSeq;
  GradientProbe probe(net, data, options, seed + 1);
  probe.training_loss = check.training_loss;
  std::vector<float>& params = probe.params;
  const std::vector<float>& analytic = probe.analytic;
  auto loss = [&] { return probe.loss(); };
  for (const cnn::ParamView& view : net.layout.views()) {
    int checked = 0, kinks = 0;
    double diff = 0.0, norm = 0.0, noise_sum = 0.0;
    for (std::int64_t i = 0; i < view.size; ++i) {
      float& x = params[static_cast<std::size_t>(view.offset + i)];
      const float saved = x;
      double numeric = 0.0, tolerance = -1.0, step_noise = 0.0;
      for (const float h : kSteps) {
        double at[5];
        for (int k = 0; k < 5; ++k) {
          x = saved + static_cast<float>(k - 2) * (h / 2);
          at[k] = loss();
        }
        x = saved;
        double low = INFINITY, high = -INFINITY;
        for (int k = 0; k < 4; ++k) {
          const double slope = (at[k + 1] - at[k]) / (h / 2);
          low = std::min(low, slope);
          high = std::max(high, slope);
        }
        numeric = (at[4] - at[0]) / (2.0 * h);
        if (check.smooth || high - low <= 0.02 * std::fabs(numeric) + 4 * noise(h, check.samples)) {
          tolerance = check.element_rel * std::fabs(numeric) + noise(h, check.samples);
          step_noise = noise(h, check.samples);
          break;
        }
        if (check.smooth) break;
      }
      if (tolerance < 0.0) {
        ++kinks;
        continue;
      }
      const double g = analytic[static_cast<std::size_t>(view.offset + i)];
      BOOST_TEST(std::fabs(g - numeric) <= tolerance,
                 spec << ": " << view.name() << "[" << i << "]: analytic " << g << " vs numeric " << numeric);
      diff += (g - numeric) * (g - numeric);
      norm += numeric * numeric;
      noise_sum += step_noise * step_noise;
      ++checked;
    }
    // The view's error may exceed view_rel by the noise of the steps taken, relative to its norm (small
    // gradients, checked at small steps near kinks).
    const double error = norm > 0.0 ? std::sqrt(diff / norm) : INFINITY;
    const double allowed = check.view_rel + (norm > 0.0 ? std::sqrt(noise_sum / norm) : 0.0);
    BOOST_TEST_MESSAGE(view.name() << ": " << checked << " checked, " << kinks << " skipped at kinks, relative error "
                                   << error << " (allowed " << allowed << "), norm " << std::sqrt(norm));
    BOOST_TEST(checked >= view.size * 3 / 4, spec << ": " << view.name() << ": too many coordinates at kinks");
    BOOST_TEST(error <= allowed, spec << ": " << view.name() << ": relative error " << error << " > " << allowed);
  }
}

}  // namespace

// No ReLU anywhere (the loss is smooth: a larger step, tight tolerances): an identity block, then a
// projection block (its 1x1 conv's own gradient, and its share of the input gradient) whose input
// gradient must reach conv1 through both branches of both blocks.
BOOST_AUTO_TEST_CASE(residual_blocks_without_kinks) {
  GradientCheck tight;
  tight.smooth = true;
  tight.element_rel = 1e-2;
  tight.view_rel = 2e-3;
  // 2x8x8 -> conv1 3x8x8 -> identity (conv2, conv3) -> projection 4x4x4 (conv4 stride 2, conv5;
  // shortcut conv6, 1x1 stride 2) -> fc.
  check_network_gradients("conv3x3:3/p1 res[conv3x3:3/p1 conv3x3:3/p1] res[conv3x3:4/s2/p1 conv3x3:4/p1] fc:4",
                          {2, 8, 8}, 21, tight);
  // The block first: no gradient passes out of it.
  check_network_gradients("res[conv3x3:3/s2/p1 conv3x3:3/p1] fc:4", {2, 8, 8}, 22, tight);
}

// The same blocks with ReLUs: after one (the identity passes the gradient to where conv1's ReLU
// masks it), inside the body, and after the sum.
BOOST_AUTO_TEST_CASE(residual_identity_and_projection_blocks) {
  check_network_gradients("conv3x3:3/p1 relu res[conv3x3:3/p1 relu conv3x3:3/p1] relu "
                          "res[conv3x3:4/s2/p1 relu conv3x3:4/p1] relu fc:4",
                          {2, 6, 6}, 23, GradientCheck{});
}

BOOST_AUTO_TEST_CASE(residual_block_first) {
  check_network_gradients("res[conv3x3:3/s2/p1 relu conv3x3:3/p1] relu fc:4", {2, 8, 8}, 24, GradientCheck{});
}

BOOST_AUTO_TEST_CASE(residual_bodies_starting_with_a_relu_or_holding_a_pool) {
  // After a conv with no ReLU: the body's ReLU masks its branch only, the identity passes everything.
  check_network_gradients("conv3x3:3/p1 res[relu conv3x3:3/p1 relu conv3x3:3/p1] fc:4", {2, 6, 6}, 25, GradientCheck{});
  // A max-pool ends the body (8 -> 4), the shortcut a 1x1 conv of stride 2.
  check_network_gradients("conv3x3:3/p1 relu res[conv3x3:4/p1 relu maxpool2] fc:4", {2, 8, 8}, 26, GradientCheck{});
}

BOOST_AUTO_TEST_CASE(residual_block_first_whose_body_starts_with_a_relu) {
  // Nothing before the block has parameters, and its body's first layer has none either.
  check_network_gradients("res[relu conv3x3:2/p1] relu fc:4", {2, 8, 8}, 27, GradientCheck{});
}

// ---- average pooling (avgpool<K>[/s<S>], the global avgpool)

// No ReLU: smooth, tight tolerances. Overlapping 3x3 windows moved by 2 (pixels in several windows,
// the last row and column in none), then the global pool of a non-square plane.
BOOST_AUTO_TEST_CASE(avgpool_windows_and_global_without_kinks) {
  GradientCheck tight;
  tight.smooth = true;
  tight.element_rel = 1e-2;
  tight.view_rel = 2e-3;
  check_network_gradients("conv3x3:3/p1 avgpool3/s2 conv3x3:4/p1 avgpool fc:4", {2, 8, 7}, 31, tight);
}

// After ReLUs (the pool's input gradient masked by the ReLU before it), inside a residual body, and first.
BOOST_AUTO_TEST_CASE(avgpool_after_relus_in_a_block_and_first) {
  check_network_gradients("conv3x3:3/p1 relu avgpool2 conv3x3:4/p1 relu avgpool fc:4", {2, 8, 8}, 32, GradientCheck{});
  check_network_gradients("conv3x3:3/p1 relu res[conv3x3:4/p1 relu avgpool2] fc:4", {2, 8, 8}, 33, GradientCheck{});
  check_network_gradients("avgpool2/s1 conv3x3:3 relu avgpool fc:4", {2, 7, 7}, 34, GradientCheck{});
}

// ---- dropout (dropout:<P>), through the training step's loss: its masks stay fixed within a step, so
// the loss is differentiable there (evaluation, with dropout off, would be another function).

BOOST_AUTO_TEST_CASE(dropout_after_pools_and_fc_layers_and_in_a_block) {
  GradientCheck dropping;
  dropping.training_loss = true;
  check_network_gradients("conv3x3:3/p1 relu dropout:0.3 avgpool2 conv3x3:4/p1 relu fc:8 relu dropout:0.5 fc:4",
                          {2, 8, 8}, 41, dropping);
  // The block's ReLU-free body keeps the kinks to conv1's ReLU (a ReLU in the body, after the scaled
  // values, puts most of conv1's coordinates at a kink for a step of this size).
  check_network_gradients("conv3x3:3/p1 relu res[conv3x3:3/p1 dropout:0.25] dropout:0.4 fc:4", {2, 6, 6}, 42, dropping);
  // No ReLU: smooth.
  dropping.smooth = true;
  dropping.element_rel = 1e-2;
  dropping.view_rel = 2e-3;
  check_network_gradients("dropout:0.2 conv3x3:3/p1 dropout:0.5 avgpool fc:4", {2, 6, 6}, 43, dropping);
}

// ---- batch norm (bn), through the training step's loss: its statistics are the batch's, functions of
// every parameter below it, and the gradient must follow them (evaluation's running statistics
// would be another function). Gamma and beta start at 1 and 0.
BOOST_AUTO_TEST_CASE(bn_after_convs_and_fc_and_in_residual_blocks) {
  // The normalisation over a small batch curves the loss: the kink test (slopes that disagree) sends
  // such coordinates to smaller steps rather than taking one large step everywhere.
  GradientCheck check;
  check.training_loss = true;
  check.samples = 8;
  // No ReLU: a bn first (on the input), after a conv, in an identity block and a projection block,
  // and after a fc layer (per feature, over the samples).
  check_network_gradients("bn conv3x3:3/p1 bn res[conv3x3:3/p1 bn conv3x3:3/p1 bn] res[conv3x3:4/s2/p1 bn] "
                          "fc:6 bn fc:4", {2, 6, 6}, 51, check);
  // (A ReLU right after a bn sits at the centre of its inputs, and every coordinate below moves all of
  // them: most steps cross a kink, so ReLU networks with bn are checked against `seq` in
  // test_backend_agreement and test_cpu_backend rather than here.)
}
