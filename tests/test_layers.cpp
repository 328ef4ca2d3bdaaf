// The layer ops of layer_ops.hpp and the CPU backend that runs them:
//   1. finite-difference gradients of every layer type (conv multi-channel with stride 2 and
//      padding 1, relu, maxpool with stride != size, avgpool windowed and global, dropout, fc) and of a whole network through the backend
//      (with flatten), and proof that the comparison fails on a gradient 5% off;
//   2. seq vs threads for the cifar preset; the seed layer by layer vs its fused ops;
//   3. one Adam step against a hand computation.
#define BOOST_TEST_MODULE layers
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <tuple>

#include "boost_test.hpp"
#include "cnn/backend.hpp"
#include "cnn/cpu_backend.hpp"
#include "cnn/layer_ops.hpp"
#include "cnn/network.hpp"
#include "cnn/ops.hpp"
#include "cnn/optimizer.hpp"
#include "cnn/sampler.hpp"
#include "test_util.hpp"

namespace {

using cnn::test::random_vector;

// Central differences of a scalar function of x, in double around float evaluations.
double numeric_derivative(const std::function<double()>& loss, float& x, float h) {
  const float saved = x;
  x = saved + h;
  const double up = loss();
  x = saved - h;
  const double down = loss();
  x = saved;
  return (up - down) / (2.0 * static_cast<double>(h));
}

// Errors are relative to the larger of the two, or to 1e-2 for smaller derivatives (float noise).
struct GradCheck {
  double tolerance = 1e-2;
  int checked = 0;
  int failed = 0;
  double worst = 0.0;
  void add(double analytic, double numeric) {
    const double error =
        std::fabs(analytic - numeric) / std::max(1e-2, std::max(std::fabs(analytic), std::fabs(numeric)));
    worst = std::max(worst, error);
    ++checked;
    if (error > tolerance) ++failed;
  }
  bool ok() const { return checked > 0 && failed == 0; }
};

// Loss = sum(out * probe): d loss / d out = probe, so backward(probe) gives d loss / d everything.
double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Checks every input, weight and bias derivative of conv2d for `shape`; `skew` scales the analytic
// weight gradient (1 = correct) so the test can prove it catches a wrong one.
GradCheck check_conv(const cnn::ConvShape& shape, std::int64_t n, float skew) {
  std::vector<float> in = random_vector(static_cast<std::size_t>(n * shape.in_size()), 1, 1.0f);
  std::vector<float> w = random_vector(static_cast<std::size_t>(shape.weight_size()), 2, 0.5f);
  std::vector<float> b = random_vector(static_cast<std::size_t>(shape.filters), 3, 0.5f);
  const std::vector<float> probe = random_vector(static_cast<std::size_t>(n * shape.out_size()), 4, 1.0f);
  std::vector<float> out(probe.size());
  auto loss = [&] {
    cnn::conv2d_forward(out.data(), in.data(), w.data(), b.data(), n, shape);
    return dot(out, probe);
  };
  std::vector<float> gin(in.size()), gw(w.size(), 0.0f), gb(b.size(), 0.0f);
  cnn::conv2d_backward(gin.data(), gw.data(), gb.data(), probe.data(), in.data(), w.data(), n, shape);
  GradCheck check;
  for (std::size_t i = 0; i < in.size(); ++i) check.add(gin[i], numeric_derivative(loss, in[i], 1e-2f));
  for (std::size_t i = 0; i < w.size(); ++i) check.add(skew * gw[i], numeric_derivative(loss, w[i], 1e-2f));
  for (std::size_t i = 0; i < b.size(); ++i) check.add(gb[i], numeric_derivative(loss, b[i], 1e-2f));
  return check;
}

// Pool inputs: a permutation of well separated values, so no derivative crosses a tie.
std::vector<float> distinct_values(std::size_t n, std::uint32_t seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = 0.05f * static_cast<float>(i) - 0.025f * static_cast<float>(n) + 0.0125f;
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(finite_differences)

BOOST_AUTO_TEST_CASE(conv_multichannel_stride2_pad1) {
  const cnn::ConvShape shape{3, 7, 6, 4, 3, 2, 1};  // 3x7x6 -> 4x4x3
  BOOST_REQUIRE(shape.out_h() == 4 && shape.out_w() == 3);
  const GradCheck check = check_conv(shape, 2, 1.0f);
  BOOST_TEST_MESSAGE("conv: " << check.checked << " derivatives, worst relative error " << check.worst);
  BOOST_TEST(check.ok());
}

BOOST_AUTO_TEST_CASE(conv_stride1_pad0_and_5x5) {
  BOOST_TEST(check_conv({2, 6, 6, 3, 3, 1, 0}, 2, 1.0f).ok());
  BOOST_TEST(check_conv({2, 9, 8, 3, 5, 2, 2}, 1, 1.0f).ok());
}

BOOST_AUTO_TEST_CASE(a_weight_gradient_5_percent_off_is_caught) {
  const GradCheck check = check_conv({3, 7, 6, 4, 3, 2, 1}, 2, 1.05f);
  BOOST_TEST(!check.ok());
  BOOST_TEST(check.failed > check.checked / 4);
}

BOOST_AUTO_TEST_CASE(relu) {
  std::vector<float> in = distinct_values(40, 5);
  const std::vector<float> probe = random_vector(in.size(), 6, 1.0f);
  std::vector<float> out(in.size()), grad(in.size());
  auto loss = [&] {
    cnn::relu_forward(out.data(), in.data(), static_cast<std::int64_t>(in.size()));
    return dot(out, probe);
  };
  loss();
  cnn::relu_backward(grad.data(), probe.data(), out.data(), static_cast<std::int64_t>(in.size()));
  GradCheck check;
  for (std::size_t i = 0; i < in.size(); ++i) check.add(grad[i], numeric_derivative(loss, in[i], 1e-2f));
  BOOST_TEST(check.ok());
  GradCheck wrong;  // the mask taken from the wrong side of zero
  for (std::size_t i = 0; i < in.size(); ++i)
    wrong.add(in[i] <= 0 ? probe[i] : 0.0f, numeric_derivative(loss, in[i], 1e-2f));
  BOOST_TEST(!wrong.ok());
}

BOOST_AUTO_TEST_CASE(maxpool_overlapping_windows) {
  const cnn::PoolShape shape{2, 7, 6, 3, 2};  // windows of 3 moved by 2: they overlap
  BOOST_REQUIRE(shape.out_h() == 3 && shape.out_w() == 2);
  const std::int64_t n = 2;
  std::vector<float> in = distinct_values(static_cast<std::size_t>(n * shape.in_size()), 7);
  const std::vector<float> probe = random_vector(static_cast<std::size_t>(n * shape.out_size()), 8, 1.0f);
  std::vector<float> out(probe.size()), grad(in.size());
  std::vector<std::int32_t> argmax(probe.size());
  auto loss = [&] {
    cnn::maxpool_forward(out.data(), argmax.data(), in.data(), n, shape);
    return dot(out, probe);
  };
  loss();
  cnn::maxpool_backward(grad.data(), probe.data(), argmax.data(), n, shape);
  GradCheck check;
  for (std::size_t i = 0; i < in.size(); ++i) check.add(grad[i], numeric_derivative(loss, in[i], 1e-2f));
  BOOST_TEST(check.ok());
}

// avgpool: windows that overlap (3 moved by 2, pixels in several windows, the last column in none)
// and the global pool of a non-square plane; finite differences, and the values by hand.
BOOST_AUTO_TEST_CASE(avgpool_overlapping_windows_and_global) {
  cnn::AvgPoolShape windows{2, 7, 6, 3, 3, 2};
  cnn::AvgPoolShape global{2, 5, 3, 5, 3, 1};
  global.global = true;
  BOOST_REQUIRE(windows.out_h() == 3 && windows.out_w() == 2);
  BOOST_REQUIRE(global.out_h() == 1 && global.out_w() == 1);
  for (const cnn::AvgPoolShape& shape : {windows, global}) {
    const std::int64_t n = 2;
    std::vector<float> in = random_vector(static_cast<std::size_t>(n * shape.in_size()), 9, 1.0f);
    const std::vector<float> probe = random_vector(static_cast<std::size_t>(n * shape.out_size()), 10, 1.0f);
    std::vector<float> out(probe.size()), grad(in.size(), -1.0f);
    auto loss = [&] {
      cnn::avgpool_forward(out.data(), in.data(), n, shape);
      return dot(out, probe);
    };
    loss();
    cnn::avgpool_backward(grad.data(), probe.data(), n, shape);
    GradCheck check;
    for (std::size_t i = 0; i < in.size(); ++i) check.add(grad[i], numeric_derivative(loss, in[i], 1e-2f));
    BOOST_TEST(check.ok(), "global " << shape.global << ": worst " << check.worst);
    // The first output is the mean of its window; the last input column of the windowed case lies in
    // no window (gradient 0), the first pixel in one (probe / 9).
    double mean = 0.0;
    for (int a = 0; a < shape.window_h; ++a)
      for (int b = 0; b < shape.window_w; ++b) mean += in[static_cast<std::size_t>(a * shape.width + b)];
    mean /= shape.window_h * shape.window_w;
    BOOST_TEST(std::fabs(out[0] - mean) < 1e-6);
    BOOST_TEST(std::fabs(grad[0] - probe[0] * shape.scale()) < 1e-7);
    if (!shape.global) BOOST_TEST(grad[static_cast<std::size_t>(shape.width - 1)] == 0.0f);
  }
}

// dropout: inverted (kept values times 1 / (1 - P), the rest 0), about P of the elements dropped, the
// backward through the same factors; the mask a pure function of (step key, sample, layer, element):
// a slice that starts at sample 3 draws what the whole batch draws for sample 3, and another step,
// sample or layer draws another mask. P = 0 changes no bit.
BOOST_AUTO_TEST_CASE(dropout_masks_scale_and_gradient) {
  const std::int64_t n = 6, size = 500;
  const std::vector<float> in = random_vector(static_cast<std::size_t>(n * size), 11, 1.0f);
  const std::vector<float> probe = random_vector(in.size(), 12, 1.0f);
  const cnn::DropoutDraw draw = cnn::dropout_draw(0.3, 4);
  const cnn::MaskOrigin origin{cnn::dropout_step_key(7, 12), 0};
  std::vector<float> out(in.size()), grad(in.size());
  cnn::dropout_forward(out.data(), in.data(), n, size, draw, origin);
  cnn::dropout_backward(grad.data(), probe.data(), n, size, draw, origin);
  std::int64_t dropped = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const bool kept = out[i] != 0.0f;
    dropped += kept ? 0 : 1;
    if (kept) BOOST_TEST(out[i] == in[i] * draw.scale);
    BOOST_TEST(grad[i] == (kept ? probe[i] * draw.scale : 0.0f));
  }
  BOOST_TEST(draw.scale == static_cast<float>(1.0 / 0.7));
  // 3000 elements at P = 0.3: 900 expected, standard deviation 25.
  BOOST_TEST(dropped > 800);
  BOOST_TEST(dropped < 1000);

  // Samples 3..5 as a slice of their own, standing at 3.
  std::vector<float> part(static_cast<std::size_t>(3 * size));
  cnn::dropout_forward(part.data(), in.data() + 3 * size, 3, size, draw, {origin.step_key, 3});
  BOOST_TEST(std::equal(part.begin(), part.end(), out.begin() + 3 * size));
  // Samples 0 and 1 of the same step differ; the same sample at another step or in another layer too.
  const auto mask_of = [&](const cnn::DropoutDraw& d, const cnn::MaskOrigin& o) {
    std::vector<float> ones(static_cast<std::size_t>(size), 1.0f), mask(ones.size());
    cnn::dropout_forward(mask.data(), ones.data(), 1, size, d, o);
    return mask;
  };
  const std::vector<float> base = mask_of(draw, origin);
  BOOST_TEST((base == mask_of(draw, origin)));
  BOOST_TEST((base != mask_of(draw, {origin.step_key, 1})));
  BOOST_TEST((base != mask_of(draw, {cnn::dropout_step_key(7, 13), 0})));
  BOOST_TEST((base != mask_of(draw, {cnn::dropout_step_key(8, 12), 0})));
  BOOST_TEST((base != mask_of(cnn::dropout_draw(0.3, 5), origin)));

  // P = 0: every bit kept.
  const cnn::DropoutDraw none = cnn::dropout_draw(0.0, 4);
  cnn::dropout_forward(out.data(), in.data(), n, size, none, origin);
  BOOST_TEST((out == in));
}

// bn: the math against a reference in double (mean, biased variance, eps 1e-5), the input gradient
// against central differences of sum(y * probe) with the statistics recomputed at each point, and
// the running statistics moved by momentum 0.1 towards the mean and the unbiased variance.
BOOST_AUTO_TEST_CASE(bn_normalises_per_channel_and_its_gradient) {
  const std::int64_t n = 5, channels = 3, spatial = 7, count = n * spatial;
  std::vector<float> x = random_vector(static_cast<std::size_t>(n * channels * spatial), 21, 2.0f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += 0.5f * static_cast<float>((i / spatial) % channels);  // means apart
  const std::vector<float> gamma = {1.5f, -0.7f, 0.9f}, beta = {0.1f, 0.0f, -2.0f};
  const std::vector<float> probe = random_vector(x.size(), 22, 1.0f);
  std::vector<float> running = {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f};
  const auto forward = [&](const std::vector<float>& input, float* moving) {
    std::vector<double> sums(2 * channels);
    std::vector<float> mean(channels), inv_std(channels), y(input.size());
    cnn::bn_channel_sums(sums.data(), input.data(), n, channels, spatial);
    cnn::bn_statistics(mean.data(), inv_std.data(), sums.data(), count, channels, moving, cnn::kBatchNormMomentum);
    cnn::bn_normalize(y.data(), input.data(), mean.data(), inv_std.data(), gamma.data(), beta.data(), n, channels,
                      spatial);
    return std::make_tuple(y, mean, inv_std);
  };
  const auto [y, mean, inv_std] = forward(x, running.data());
  for (std::int64_t c = 0; c < channels; ++c) {
    double m = 0.0, v = 0.0;
    for (std::int64_t s = 0; s < n; ++s)
      for (std::int64_t i = 0; i < spatial; ++i) m += x[static_cast<std::size_t>((s * channels + c) * spatial + i)];
    m /= count;
    for (std::int64_t s = 0; s < n; ++s)
      for (std::int64_t i = 0; i < spatial; ++i) {
        const double d = x[static_cast<std::size_t>((s * channels + c) * spatial + i)] - m;
        v += d * d;
      }
    v /= count;
    for (std::int64_t s = 0; s < n; ++s)
      for (std::int64_t i = 0; i < spatial; ++i) {
        const auto at = static_cast<std::size_t>((s * channels + c) * spatial + i);
        const double expected = gamma[c] * (x[at] - m) / std::sqrt(v + 1e-5) + beta[c];
        BOOST_TEST(std::fabs(y[at] - expected) <= 1e-5 * std::max(1.0, std::fabs(expected)));
      }
    BOOST_TEST(std::fabs(running[c] - 0.1 * m) <= 1e-6);
    BOOST_TEST(std::fabs(running[channels + c] - (0.9 + 0.1 * v * count / (count - 1))) <= 1e-5);
  }
  // The backward: d gamma and d beta sums, and the input gradient.
  std::vector<double> sums(2 * channels);
  std::vector<float> grad_x(x.size());
  cnn::bn_gradient_sums(sums.data(), probe.data(), x.data(), mean.data(), inv_std.data(), n, channels, spatial);
  cnn::bn_input_gradient(grad_x.data(), probe.data(), x.data(), mean.data(), inv_std.data(), gamma.data(), sums.data(),
                         count, n, channels, spatial);
  GradCheck check{1e-2}, skewed{1e-2};
  std::vector<float> moved = x;
  const auto loss = [&] { return dot(std::get<0>(forward(moved, nullptr)), probe); };
  for (std::size_t i = 0; i < x.size(); i += 3) {
    const double numeric = numeric_derivative(loss, moved[i], 1e-2f);
    check.add(grad_x[i], numeric);
    skewed.add(1.05 * grad_x[i], numeric);
  }
  BOOST_TEST_MESSAGE("bn: " << check.checked << " input derivatives, worst relative error " << check.worst);
  BOOST_TEST(check.ok());
  BOOST_TEST(!skewed.ok());
  // sum(probe) is d beta; sum(probe * xhat) is d gamma.
  for (std::int64_t c = 0; c < channels; ++c) {
    double dbeta = 0.0, dgamma = 0.0;
    for (std::int64_t s = 0; s < n; ++s)
      for (std::int64_t i = 0; i < spatial; ++i) {
        const auto at = static_cast<std::size_t>((s * channels + c) * spatial + i);
        dbeta += probe[at];
        dgamma += probe[at] * (y[at] - beta[c]) / gamma[c];
      }
    BOOST_TEST(std::fabs(sums[static_cast<std::size_t>(c)] - dbeta) <= 1e-6 * std::max(1.0, std::fabs(dbeta)));
    BOOST_TEST(std::fabs(sums[static_cast<std::size_t>(channels + c)] - dgamma) <= 1e-4 * std::max(1.0, std::fabs(dgamma)));
  }
}

BOOST_AUTO_TEST_CASE(fc) {
  const std::int64_t n = 3, inputs = 7, outputs = 5;
  std::vector<float> in = random_vector(static_cast<std::size_t>(n * inputs), 9, 1.0f);
  std::vector<float> w = random_vector(static_cast<std::size_t>(outputs * inputs), 10, 0.5f);
  std::vector<float> b = random_vector(static_cast<std::size_t>(outputs), 11, 0.5f);
  const std::vector<float> probe = random_vector(static_cast<std::size_t>(n * outputs), 12, 1.0f);
  std::vector<float> out(probe.size());
  auto loss = [&] {
    cnn::fc_forward(out.data(), in.data(), w.data(), b.data(), n, inputs, outputs);
    return dot(out, probe);
  };
  std::vector<float> gin(in.size()), gw(w.size(), 0.0f), gb(b.size(), 0.0f);
  cnn::fc_backward(gin.data(), gw.data(), gb.data(), probe.data(), in.data(), w.data(), n, inputs, outputs);
  GradCheck check;
  for (std::size_t i = 0; i < in.size(); ++i) check.add(gin[i], numeric_derivative(loss, in[i], 1e-2f));
  for (std::size_t i = 0; i < w.size(); ++i) check.add(gw[i], numeric_derivative(loss, w[i], 1e-2f));
  for (std::size_t i = 0; i < b.size(); ++i) check.add(gb[i], numeric_derivative(loss, b[i], 1e-2f));
  BOOST_TEST(check.ok());
}

// Every parameter of a network with every layer type (an explicit flatten among them), through the
// `seq` backend: analytic gradients from compute_gradients, numeric ones from evaluate's loss.
BOOST_AUTO_TEST_CASE(whole_network_through_the_backend) {
  const cnn::Dataset data = cnn::test::random_dataset(6, {2, 11, 10}, 13, 4);
  const cnn::Network net =
      cnn::build_network("conv3x3:4/s2/p1 relu conv3x3:5 relu maxpool2/s1 flatten fc:6 relu fc:4", 0, data.shape, 4);
  BOOST_REQUIRE(!net.as_seed());
  cnn::BackendOptions seq;
  seq.kind = cnn::BackendKind::kSeq;
  auto backend = cnn::make_cpu_backend(net, seq);
  backend->bind_data(data, data);
  std::vector<float> params(static_cast<std::size_t>(net.layout.total()));
  cnn::initialize_params(params.data(), net.layout, 17);
  std::vector<std::int32_t> order(static_cast<std::size_t>(data.count()));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
  backend->upload_params(params);
  backend->begin_epoch(order);
  backend->compute_gradients(0, data.count());
  const std::vector<float> grads(backend->grads(), backend->grads() + net.layout.total());
  auto loss = [&] {
    backend->upload_params(params);
    return backend->evaluate(0, data.count()).loss_sum;
  };
  // A step of h may carry some pre-activation across a relu or pool kink, where central differences
  // mean nothing; such entries show as one-sided slopes that disagree, and are skipped (few may be).
  // Whole-network sums carry more float noise than one op: 3%, still below a 5% error.
  GradCheck check{3e-2}, skewed{3e-2};
  int kinks = 0;
  for (const cnn::ParamView& view : net.layout.views()) {
    // Up to 12 entries of every tensor, spread over it.
    const std::int64_t stride = std::max<std::int64_t>(1, view.size / 12);
    for (std::int64_t i = 0; i < view.size; i += stride) {
      float& x = params[static_cast<std::size_t>(view.offset + i)];
      const float h = 1e-2f, saved = x;
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
      const double analytic = grads[static_cast<std::size_t>(view.offset + i)];
      check.add(analytic, (up - down) / (2.0 * h));
      skewed.add(1.05 * analytic, (up - down) / (2.0 * h));
    }
  }
  BOOST_TEST_MESSAGE("network: skipped " << kinks << " entries at kinks");
  BOOST_TEST(kinks <= check.checked / 4);
  BOOST_TEST(!skewed.ok());  // gradients 5% too large are caught
  BOOST_TEST_MESSAGE("network: " << check.checked << " derivatives, worst relative error " << check.worst);
  BOOST_TEST(check.ok());
}

BOOST_AUTO_TEST_SUITE_END()

// ---- backend agreement ----------------------------------------------------------------------------

namespace {

std::vector<float> step_gradients(std::unique_ptr<cnn::Backend> backend, const cnn::Dataset& data,
                                  const std::vector<float>& params, std::int64_t count, cnn::BatchStats* stats) {
  backend->bind_data(data, data);
  backend->upload_params(params);
  backend->begin_epoch(cnn::Sampler(5, data.count()).permutation(0));
  backend->compute_gradients(0, count);
  *stats = backend->take_train_stats();
  return std::vector<float>(backend->grads(), backend->grads() + params.size());
}

void check_close(const cnn::ParamLayout& layout, const std::vector<float>& a, const std::vector<float>& b,
                 double tolerance) {
  for (const cnn::ParamView& view : layout.views()) {
    const std::vector<float> x(a.begin() + view.offset, a.begin() + view.offset + view.size);
    const std::vector<float> y(b.begin() + view.offset, b.begin() + view.offset + view.size);
    const double error = cnn::test::relative_error(x, y);
    BOOST_TEST(error <= tolerance, view.name() << ": relative error " << error);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(cifar_preset_threads_agree_with_seq) {
  const cnn::Dataset data = cnn::test::random_dataset(150, {1, 28, 28}, 23);
  const cnn::Network net = cnn::build_network("cifar", 0, data.shape, 10);
  std::vector<float> params(static_cast<std::size_t>(net.layout.total()));
  cnn::initialize_params(params.data(), net.layout, 3);
  cnn::BatchStats seq_stats, stats;
  cnn::BackendOptions options;
  options.kind = cnn::BackendKind::kSeq;
  const std::vector<float> reference = step_gradients(cnn::make_backend(options, net), data, params, 150, &seq_stats);
  for (int threads : {2, 3}) {
    options.kind = cnn::BackendKind::kThreads;
    options.threads = threads;
    const std::vector<float> other = step_gradients(cnn::make_backend(options, net), data, params, 150, &stats);
    BOOST_TEST(stats.correct == seq_stats.correct);
    BOOST_TEST(std::fabs(stats.loss_sum - seq_stats.loss_sum) <= 1e-5 * seq_stats.loss_sum);
    check_close(net.layout, other, reference, 1e-5);
  }
  // Deterministic: the same backend kind twice gives the same bits.
  options.threads = 2;
  const std::vector<float> again = step_gradients(cnn::make_backend(options, net), data, params, 150, &stats);
  const std::vector<float> once = step_gradients(cnn::make_backend(options, net), data, params, 150, &stats);
  BOOST_TEST((again == once));
}

// dropout:0 changes no bit: a network with it gives the gradients and losses of the network without
// it (the same parameters), on both CPU backends; dropout:0.5 does change them (its masks are drawn),
// and evaluation, where dropout is off, gives the same loss with or without it.
BOOST_AUTO_TEST_CASE(dropout_zero_is_bitwise_no_layer) {
  const cnn::Dataset data = cnn::test::random_dataset(80, {1, 12, 12}, 31);
  const cnn::Network plain = cnn::build_network("conv3x3:4 relu maxpool2 fc:16 relu fc:10", 0, data.shape, 10);
  const cnn::Network zero =
      cnn::build_network("dropout:0 conv3x3:4 relu maxpool2 dropout:0.0 fc:16 relu dropout:0 fc:10", 0, data.shape, 10);
  const cnn::Network half = cnn::build_network("conv3x3:4 relu maxpool2 fc:16 relu dropout:0.5 fc:10", 0, data.shape, 10);
  BOOST_TEST(zero.spec == "dropout:0 conv3x3:4 relu maxpool2 dropout:0 fc:16 relu dropout:0 fc:10");
  BOOST_REQUIRE(zero.layout.total() == plain.layout.total());
  std::vector<float> params(static_cast<std::size_t>(plain.layout.total()));
  cnn::initialize_params(params.data(), plain.layout, 6);
  for (const cnn::BackendKind kind : {cnn::BackendKind::kSeq, cnn::BackendKind::kThreads}) {
    cnn::BackendOptions options;
    options.kind = kind;
    options.threads = 2;
    cnn::BatchStats plain_stats, zero_stats, half_stats;
    const std::vector<float> a = step_gradients(cnn::make_backend(options, plain), data, params, 80, &plain_stats);
    const std::vector<float> b = step_gradients(cnn::make_backend(options, zero), data, params, 80, &zero_stats);
    const std::vector<float> c = step_gradients(cnn::make_backend(options, half), data, params, 80, &half_stats);
    BOOST_TEST((a == b));
    BOOST_TEST(plain_stats.loss_sum == zero_stats.loss_sum);
    BOOST_TEST((a != c));
    auto evaluated = [&](const cnn::Network& net) {
      auto backend = cnn::make_backend(options, net);
      backend->bind_data(data, data);
      backend->upload_params(params);
      return backend->evaluate(0, data.count()).loss_sum;
    };
    BOOST_TEST(evaluated(plain) == evaluated(half));
  }
}

// The seed model layer by layer (`seq`, the reference plan) against its fused conv_relu_pool op (the
// CPU plan of `threads`, here on one thread so only the ops differ).
BOOST_AUTO_TEST_CASE(layer_by_layer_seed_matches_its_fused_ops) {
  const cnn::Dataset data = cnn::test::random_dataset(100, {1, 28, 28}, 29);
  const cnn::Network net = cnn::build_network("seed", 16, data.shape, 10);
  BOOST_REQUIRE(net.as_seed().has_value());
  std::vector<float> params(static_cast<std::size_t>(net.layout.total()));
  cnn::initialize_params(params.data(), net.layout, 4);
  cnn::BatchStats fused_stats, layer_stats;
  cnn::BackendOptions options;
  options.kind = cnn::BackendKind::kThreads;
  options.threads = 1;
  auto fused_backend = cnn::make_cpu_backend(net, options);
  BOOST_TEST(fused_backend->device_description().find("ops conv_relu_pool fc softmax_cross_entropy") != std::string::npos);
  const std::vector<float> fused = step_gradients(std::move(fused_backend), data, params, 100, &fused_stats);
  options.kind = cnn::BackendKind::kSeq;
  auto layer_backend = cnn::make_cpu_backend(net, options);
  BOOST_TEST(layer_backend->device_description().find("ops conv relu maxpool fc softmax_cross_entropy") !=
             std::string::npos);
  const std::vector<float> layered = step_gradients(std::move(layer_backend), data, params, 100, &layer_stats);
  BOOST_TEST(layer_stats.correct == fused_stats.correct);
  BOOST_TEST(std::fabs(layer_stats.loss_sum - fused_stats.loss_sum) <= 1e-5 * fused_stats.loss_sum);
  check_close(net.layout, layered, fused, 1e-5);
}

