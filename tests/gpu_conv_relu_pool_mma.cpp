// The first layer's conv3x3 + ReLU + 2x2 max-pool on tensor cores (kernels/ops/conv_relu_pool_mma.cu),
// in tf32 and bf16, against the fp32 kernels of the same op (conv_relu_pool.cu) on the same uint8
// data through the same indices: 1 and 3 channels, 5, 32 and 37 filters (no whole group of 8 or 32),
// batches of 1, 37 and 300, pooled sizes with no whole 16-cell tile (13x13, 15x15, 3x4).
//   forward   the patches the weight gradient reads: the same bits; pooled within a norm-wise
//             relative 1e-3 (tf32) or 1e-2 (bf16); each winner (a*2+b) a maximum of the cell's four
//             exact conv outputs within the rounding of the weights (a different winner only where
//             the four tie within it), and the ReLU's mark set exactly where pooled is 0;
//   gradient  of the weights and the bias against the fp32 sweep given the same winners and
//             dL/dpooled: within 5e-3 (tf32) or 3e-2 (bf16) norm-wise for the weights, 1e-4 for the
//             bias (summed in fp32 both); accumulate adds to what is there;
//   repeat    two runs give the same bits;
//   the op    takes these forms in tf32 and bf16 as the first op only (its settings line says so).
// measure_conv_relu_pool (disabled unless named) times the fp32 and tensor-core kernels for the cifar
// preset's first layer (3x32x32, 32 filters) at batch 128, 512 and 2048.
// With no usable GPU it prints "SKIP: ..." and exits with 77, which CTest reports as skipped.
#define BOOST_TEST_MODULE gpu_conv_relu_pool_mma
#include "boost_test.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/network.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/ops/layer_ops.hpp"
#include "kernels/ops/seed_shape.hpp"
#include "gpu_test_util.hpp"

namespace {

using cnn::gpu_test::DeviceBuffer;
using cnn::gpu_test::poisoned;
using cnn::gpu_test::to_device;
using cnn::gpu_test::to_host;

struct RequireGpu {
  RequireGpu() { cnn::gpu_test::require_gpu(8); }
};
BOOST_TEST_GLOBAL_FIXTURE(RequireGpu);

constexpr cnn::Precision kTensorCorePrecisions[] = {cnn::Precision::kTf32, cnn::Precision::kBf16};

double pooled_bound(cnn::Precision p) { return p == cnn::Precision::kTf32 ? 1e-3 : 1e-2; }
double grad_bound(cnn::Precision p) { return p == cnn::Precision::kTf32 ? 5e-3 : 3e-2; }
// The relative rounding of one weight (tf32: 10 bits kept, bf16: 7), for the winners' tie test.
double weight_rounding(cnn::Precision p) { return p == cnn::Precision::kTf32 ? 1.0 / 2048 : 1.0 / 256; }

// A data set of `count` random images, a batch of n of them through shuffled indices, the layer's
// parameters, and a dL/dpooled; all on the device.
struct Problem {
  cnn::SeedModel model;
  std::int64_t n = 0;
  std::vector<std::uint8_t> images;
  std::vector<std::int32_t> indices;
  std::vector<float> weight, bias, grad_pooled;
  DeviceBuffer<std::uint8_t> d_images;
  DeviceBuffer<std::int32_t> d_indices;
  DeviceBuffer<float> d_weight, d_bias, d_grad_pooled;

  Problem(cnn::TensorShape input, int filters, std::int64_t batch, std::uint32_t seed) : n(batch) {
    model.input = input;
    model.filters = filters;
    std::mt19937 rng(seed);
    const std::int64_t count = n + 5;
    images = cnn::gpu_test::random_bytes(rng, static_cast<std::size_t>(count * input.size()), 256);
    std::vector<std::int32_t> all(static_cast<std::size_t>(count));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    indices.assign(all.begin(), all.begin() + n);
    const float scale = 1.0f / std::sqrt(static_cast<float>(input.channels * 9));
    weight = cnn::gpu_test::uniform(rng, static_cast<std::size_t>(filters * input.channels * 9), -scale, scale);
    // Biases around zero, so that the ReLU cuts some cells and not others.
    bias = cnn::gpu_test::uniform(rng, static_cast<std::size_t>(filters), -0.3f, 0.1f);
    grad_pooled = cnn::gpu_test::uniform(rng, static_cast<std::size_t>(n * model.fc_inputs()), -1.0f, 1.0f);
    d_images = to_device(images);
    d_indices = to_device(indices);
    d_weight = to_device(weight);
    d_bias = to_device(bias);
    d_grad_pooled = to_device(grad_pooled);
  }
  std::int64_t cells() const { return std::int64_t{model.pooled().height} * model.pooled().width; }
  std::int64_t outputs() const { return n * model.fc_inputs(); }
  std::int64_t patch_words() const { return n * model.input.channels * cells(); }

  // The four outputs p = a*2+b of pool cell `cell` of filter f of sample s, exactly (in double) from
  // the bytes, and the largest of their sums of |w| * pixel: the scale of their rounding errors.
  void cell_outputs(std::int64_t s, int f, std::int64_t cell, double (&z)[4], double& magnitude) const {
    const cnn::TensorShape in = model.input;
    const int pw = model.pooled().width;
    const std::uint8_t* image = images.data() + indices[static_cast<std::size_t>(s)] * in.size();
    magnitude = 0.0;
    for (int p = 0; p < 4; ++p) {
      const std::int64_t y = 2 * (cell / pw) + p / 2, x = 2 * (cell % pw) + p % 2;
      double sum = bias[static_cast<std::size_t>(f)], size = 0.0;
      for (int c = 0; c < in.channels; ++c)
        for (int i = 0; i < 3; ++i)
          for (int k = 0; k < 3; ++k) {
            const std::size_t tap = static_cast<std::size_t>(((f * in.channels + c) * 3 + i) * 3 + k);
            const double pixel = image[(c * in.height + y + i) * in.width + x + k] * double{cnn::cuda::kPixelScale};
            const double term = double{weight[tap]} * pixel;
            sum += term;
            size += std::abs(term);
          }
      z[p] = sum;
      magnitude = std::max(magnitude, size);
    }
  }
};

struct Forward {
  std::vector<float> pooled;
  std::vector<std::uint8_t> winners;
  std::vector<uint4> patches;
};

Forward fp32_forward(const Problem& pr) {
  auto pooled = poisoned<float>(pr.outputs());
  auto winners = poisoned<std::uint8_t>(pr.outputs());
  auto patches = poisoned<uint4>(pr.patch_words());
  cnn::cuda::conv_relu_pool_forward_from_data(pooled.get(), winners.get(), patches.get(), pr.d_images.get(),
                                              pr.d_indices.get(), pr.d_weight.get(), pr.d_bias.get(), pr.n, pr.model,
                                              nullptr);
  CNN_CHECK_CUDA(cudaGetLastError());
  return {to_host(pooled), to_host(winners), to_host(patches)};
}

struct MmaRun {
  Forward forward;
  std::vector<float> grad_weight, grad_bias;
};

// The tensor-core forward and weight gradient; accumulate_onto: the gradient is added to these.
MmaRun mma_run(const Problem& pr, cnn::Precision precision, const std::vector<float>* accumulate_onto = nullptr) {
  const cnn::cuda::ConvReluPoolMmaPlan plan = cnn::cuda::plan_conv_relu_pool_mma(pr.model, pr.n, precision);
  auto pooled = poisoned<float>(pr.outputs());
  auto winners = poisoned<std::uint8_t>(pr.outputs());
  auto patches = poisoned<uint4>(pr.patch_words());
  auto fragments = poisoned<std::uint32_t>(plan.fragment_words);
  auto workspace = poisoned<float>(std::max<std::int64_t>(1, plan.workspace_floats));
  cnn::cuda::conv_relu_pool_forward_from_data_mma(plan, pooled.get(), winners.get(), patches.get(), pr.d_images.get(),
                                                  pr.d_indices.get(), pr.d_weight.get(), pr.d_bias.get(),
                                                  fragments.get(), pr.n, pr.model, nullptr);
  CNN_CHECK_CUDA(cudaGetLastError());
  const std::int64_t taps = pr.model.filters * pr.model.input.channels * 9;
  DeviceBuffer<float> grad_weight, grad_bias;
  if (accumulate_onto != nullptr) {
    grad_weight = to_device(std::vector<float>(accumulate_onto->begin(), accumulate_onto->begin() + taps));
    grad_bias = to_device(std::vector<float>(accumulate_onto->begin() + taps, accumulate_onto->end()));
  } else {
    grad_weight = poisoned<float>(taps);
    grad_bias = poisoned<float>(pr.model.filters);
  }
  cnn::cuda::conv_relu_pool_backward_weights_mma(plan, grad_weight.get(), grad_bias.get(), pr.d_grad_pooled.get(),
                                                 winners.get(), patches.get(), pr.n, pr.model,
                                                 accumulate_onto != nullptr, workspace.get(), nullptr);
  CNN_CHECK_CUDA(cudaGetLastError());
  return {{to_host(pooled), to_host(winners), to_host(patches)}, to_host(grad_weight), to_host(grad_bias)};
}

// The fp32 sweep's weight gradient for the tensor-core forward's winners (cut mark removed) and pooled.
std::pair<std::vector<float>, std::vector<float>> fp32_gradient(const Problem& pr, const Forward& f) {
  std::vector<std::uint8_t> winners = f.winners;
  for (std::uint8_t& w : winners) w &= 3;
  const auto d_pooled = to_device(f.pooled);
  const auto d_winners = to_device(winners);
  const auto d_patches = to_device(f.patches);
  const cnn::cuda::ConvReluPoolPlan plan = cnn::cuda::plan_conv_relu_pool(pr.model, pr.n, /*from_patches=*/true);
  auto workspace = poisoned<float>(std::max<std::int64_t>(1, plan.workspace_floats));
  auto grad_weight = poisoned<float>(pr.model.filters * pr.model.input.channels * 9);
  auto grad_bias = poisoned<float>(pr.model.filters);
  cnn::cuda::conv_relu_pool_backward_weights(plan, grad_weight.get(), grad_bias.get(), pr.d_grad_pooled.get(),
                                             d_pooled.get(), d_winners.get(), nullptr, d_patches.get(), pr.n,
                                             pr.model, false, workspace.get(), nullptr);
  CNN_CHECK_CUDA(cudaGetLastError());
  return {to_host(grad_weight), to_host(grad_bias)};
}

bool same_words(const std::vector<uint4>& a, const std::vector<uint4>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].x != b[i].x || a[i].y != b[i].y || a[i].z != b[i].z || a[i].w != b[i].w) return false;
  return true;
}

struct Case {
  cnn::TensorShape input;
  int filters;
  std::int64_t n;
};
const Case kCases[] = {
    {{1, 28, 28}, 32, 37},  {{3, 32, 32}, 32, 300}, {{3, 32, 32}, 37, 1},  {{1, 28, 28}, 5, 300},
    {{3, 9, 10}, 5, 37},    {{1, 9, 10}, 37, 1},    {{3, 32, 32}, 5, 37},
};

std::string name_of(const Case& c, cnn::Precision p) {
  return std::to_string(c.input.channels) + "x" + std::to_string(c.input.height) + "x" + std::to_string(c.input.width) +
         ", " + std::to_string(c.filters) + " filters, batch " + std::to_string(c.n) + ", " + cnn::precision_name(p);
}

}  // namespace

BOOST_AUTO_TEST_CASE(forward_matches_the_fp32_kernel) {
  std::uint32_t seed = 1;
  for (const Case& c : kCases) {
    const Problem pr(c.input, c.filters, c.n, seed++);
    const Forward want = fp32_forward(pr);
    for (const cnn::Precision precision : kTensorCorePrecisions) {
      BOOST_TEST_CONTEXT(name_of(c, precision)) {
        const Forward got = mma_run(pr, precision).forward;
        BOOST_TEST(same_words(got.patches, want.patches));
        const double err = cnn::gpu_test::relative_error(got.pooled, want.pooled);
        BOOST_TEST(err <= pooled_bound(precision), "pooled: relative error " << err);
        std::printf("  forward, %s: pooled relative error %.2e\n", name_of(c, precision).c_str(), err);
        // Each winner within rounding of its cell's maximum; the ReLU's mark where pooled is 0.
        std::int64_t bad_winners = 0, bad_marks = 0, other_winner = 0;
        const int filters = c.filters;
        for (std::int64_t s = 0; s < c.n; ++s)
          for (int f = 0; f < filters; ++f)
            for (std::int64_t cell = 0; cell < pr.cells(); ++cell) {
              const std::size_t o = static_cast<std::size_t>((s * filters + f) * pr.cells() + cell);
              const unsigned w = got.winners[o];
              if (w > 7 || ((w & cnn::cuda::kReluCutBit) != 0) != (got.pooled[o] == 0.0f)) ++bad_marks;
              double z[4], magnitude = 0.0;
              pr.cell_outputs(s, f, cell, z, magnitude);
              const double best = std::max(std::max(z[0], z[1]), std::max(z[2], z[3]));
              const double chosen = z[w & 3];
              if (chosen < best - 2.0 * weight_rounding(precision) * magnitude - 1e-6) ++bad_winners;
              if ((w & 3) != want.winners[o]) ++other_winner;
            }
        BOOST_TEST(bad_marks == 0);
        BOOST_TEST(bad_winners == 0);
        // Ties within rounding are rare on random bytes: a wrong order of p would differ everywhere.
        BOOST_TEST(other_winner * 20 <= c.n * filters * pr.cells() + 20, "winners other than fp32's: " << other_winner);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(weight_gradient_matches_the_fp32_sweep) {
  std::uint32_t seed = 100;
  for (const Case& c : kCases) {
    const Problem pr(c.input, c.filters, c.n, seed++);
    for (const cnn::Precision precision : kTensorCorePrecisions) {
      BOOST_TEST_CONTEXT(name_of(c, precision)) {
        const MmaRun got = mma_run(pr, precision);
        const auto [want_weight, want_bias] = fp32_gradient(pr, got.forward);
        const double err_w = cnn::gpu_test::relative_error(got.grad_weight, want_weight);
        const double err_b = cnn::gpu_test::relative_error(got.grad_bias, want_bias);
        std::printf("  gradient, %s: weight %.2e, bias %.2e\n", name_of(c, precision).c_str(), err_w, err_b);
        BOOST_TEST(err_w <= grad_bound(precision), "weight gradient: relative error " << err_w);
        BOOST_TEST(err_b <= 1e-4, "bias gradient: relative error " << err_b);
        // A bf16 gradient is not as close as tf32's must be: the bound tells them apart (where the
        // gradient has enough terms for rounding to show).
        if (precision == cnn::Precision::kBf16 && c.n >= 37) BOOST_TEST(err_w > 1e-4);

        // accumulate adds the same sums onto what is there: x + x, exactly 2x.
        std::vector<float> onto = got.grad_weight;
        onto.insert(onto.end(), got.grad_bias.begin(), got.grad_bias.end());
        const MmaRun twice = mma_run(pr, precision, &onto);
        bool doubled = true;
        for (std::size_t i = 0; i < got.grad_weight.size(); ++i)
          doubled &= twice.grad_weight[i] == 2.0f * got.grad_weight[i];
        for (std::size_t i = 0; i < got.grad_bias.size(); ++i) doubled &= twice.grad_bias[i] == 2.0f * got.grad_bias[i];
        BOOST_TEST(doubled);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(reruns_repeat_bit_for_bit) {
  const Problem pr({3, 32, 32}, 32, 300, 7);
  for (const cnn::Precision precision : kTensorCorePrecisions) {
    BOOST_TEST_CONTEXT(cnn::precision_name(precision)) {
      const MmaRun first = mma_run(pr, precision);
      const MmaRun again = mma_run(pr, precision);
      BOOST_TEST(cnn::gpu_test::bitwise_equal(first.forward.pooled, again.forward.pooled));
      BOOST_TEST(first.forward.winners == again.forward.winners);
      BOOST_TEST(cnn::gpu_test::bitwise_equal(first.grad_weight, again.grad_weight));
      BOOST_TEST(cnn::gpu_test::bitwise_equal(first.grad_bias, again.grad_bias));
    }
  }
}

BOOST_AUTO_TEST_CASE(plans_name_the_precision_and_cover_the_cells) {
  cnn::SeedModel m;
  m.input = {3, 32, 32};
  m.filters = 37;
  for (const cnn::Precision precision : kTensorCorePrecisions)
    for (const std::int64_t n : {1, 128, 2048}) {
      const cnn::cuda::ConvReluPoolMmaPlan plan = cnn::cuda::plan_conv_relu_pool_mma(m, n, precision);
      BOOST_TEST(plan.describe().find(std::string("mma.") + cnn::precision_name(precision)) != std::string::npos);
      BOOST_TEST(plan.forward_groups == 2);
      BOOST_TEST(plan.grad_groups == 5);
      BOOST_TEST(plan.splits * plan.chunks_per_split >= n * plan.chunks_per_sample);
      BOOST_TEST((plan.splits - 1) * plan.chunks_per_split < n * plan.chunks_per_sample);
    }
}

// The op takes these forms in tf32 and bf16 as the network's first op (reading the data set) and the
// fp32 kernels otherwise: its line of the settings block says which.
BOOST_AUTO_TEST_CASE(the_op_runs_on_tensor_cores_as_the_first_op_in_tf32_and_bf16) {
  struct Net {
    const char* spec;
    int width;
    cnn::TensorShape input;
    std::string line;  // the start of the op's line
  };
  const Net nets[] = {
      {"cifar", 32, {3, 32, 32}, "op 0 conv_relu_pool: "},
      {"cifar", 32, {1, 28, 28}, "op 0 conv_relu_pool: "},
      // After a block without parameters the op reads floats: fp32 in every precision.
      {"res[relu] conv3x3:8 relu maxpool2 res[conv3x3:8/p1] relu fc:10", 0, {3, 16, 16}, "op 1 conv_relu_pool: "},
  };
  for (const Net& net_case : nets)
    for (const cnn::Precision precision : {cnn::Precision::kFp32, cnn::Precision::kTf32, cnn::Precision::kBf16}) {
      const cnn::Network net = cnn::build_network(net_case.spec, net_case.width, net_case.input, 10);
      cnn::BackendOptions options;
      options.kind = cnn::BackendKind::kCuda;
      options.optimizer = cnn::OptimizerKind::kAdam;
      options.precision = precision;
      const auto backend = cnn::make_backend(options, net);
      std::string line;
      for (const std::string& l : backend->implementation_lines(128))
        if (l.rfind(net_case.line, 0) == 0) line = l;
      const bool tensor_cores = precision != cnn::Precision::kFp32 && net_case.line == "op 0 conv_relu_pool: ";
      const std::string want = tensor_cores ? std::string("mma.") + cnn::precision_name(precision) : "fma.fp32";
      BOOST_TEST(line.find(want) != std::string::npos,
                 net_case.spec << " in " << cnn::precision_name(precision) << ": \"" << line << "\" has no " << want);
    }
}

// ---- measurement (disabled unless named) ------------------------------------------------------------

namespace {

// Mean microseconds of `launch` over 20 runs after 3 warm-up runs, on the default stream.
template <class Launch>
double time_us(Launch launch) {
  for (int i = 0; i < 3; ++i) launch();
  cudaEvent_t start = nullptr, stop = nullptr;
  CNN_CHECK_CUDA(cudaEventCreate(&start));
  CNN_CHECK_CUDA(cudaEventCreate(&stop));
  constexpr int kRuns = 20;
  CNN_CHECK_CUDA(cudaEventRecord(start));
  for (int i = 0; i < kRuns; ++i) launch();
  CNN_CHECK_CUDA(cudaEventRecord(stop));
  CNN_CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0.0f;
  CNN_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  CNN_CHECK_CUDA(cudaEventDestroy(start));
  CNN_CHECK_CUDA(cudaEventDestroy(stop));
  return 1e3 * ms / kRuns;
}

}  // namespace

// The cifar preset's first layer (3x32x32 uint8 through indices, 32 filters) alone: the fp32 kernels
// and the tensor-core ones, forward (with the patches saved, as in training) and weight gradient
// (with its finalize), in microseconds.
//   ./gpu_conv_relu_pool_mma --run_test=measure_conv_relu_pool
BOOST_AUTO_TEST_CASE(measure_conv_relu_pool, *boost::unit_test::disabled() * boost::unit_test::label("measurement")) {
  std::printf("%-6s %5s %-5s %-90s %9s\n", "layer", "n", "prec", "pass (implementation)", "us");
  for (const std::int64_t n : {128, 512, 2048}) {
    const Problem pr({3, 32, 32}, 32, n, 3);
    auto pooled = poisoned<float>(pr.outputs());
    auto winners = poisoned<std::uint8_t>(pr.outputs());
    auto patches = poisoned<uint4>(pr.patch_words());
    auto grad_weight = poisoned<float>(32 * 27);
    auto grad_bias = poisoned<float>(32);
    auto report = [&](cnn::Precision p, const std::string& what, double us) {
      std::printf("%-6s %5lld %-5s %-90s %9.1f\n", "conv1", static_cast<long long>(n), cnn::precision_name(p),
                  what.c_str(), us);
      std::fflush(stdout);
    };
    {
      const cnn::cuda::ConvReluPoolPlan plan = cnn::cuda::plan_conv_relu_pool(pr.model, n, true);
      auto workspace = poisoned<float>(std::max<std::int64_t>(1, plan.workspace_floats));
      report(cnn::Precision::kFp32, "forward from data (fma.fp32)", time_us([&] {
               cnn::cuda::conv_relu_pool_forward_from_data(pooled.get(), winners.get(), patches.get(),
                                                           pr.d_images.get(), pr.d_indices.get(), pr.d_weight.get(),
                                                           pr.d_bias.get(), n, pr.model, nullptr);
             }));
      report(cnn::Precision::kFp32, "weight gradient from patches (fma.fp32 sweep + finalize)", time_us([&] {
               cnn::cuda::conv_relu_pool_backward_weights(plan, grad_weight.get(), grad_bias.get(),
                                                          pr.d_grad_pooled.get(), pooled.get(), winners.get(), nullptr,
                                                          patches.get(), n, pr.model, false, workspace.get(), nullptr);
             }));
    }
    for (const cnn::Precision p : kTensorCorePrecisions) {
      const cnn::cuda::ConvReluPoolMmaPlan plan = cnn::cuda::plan_conv_relu_pool_mma(pr.model, n, p);
      auto fragments = poisoned<std::uint32_t>(plan.fragment_words);
      auto workspace = poisoned<float>(std::max<std::int64_t>(1, plan.workspace_floats));
      report(p, "forward from data (" + plan.describe() + ")", time_us([&] {
               cnn::cuda::conv_relu_pool_forward_from_data_mma(plan, pooled.get(), winners.get(), patches.get(),
                                                               pr.d_images.get(), pr.d_indices.get(), pr.d_weight.get(),
                                                               pr.d_bias.get(), fragments.get(), n, pr.model, nullptr);
             }));
      report(p, "weight gradient from patches (mma + finalize)", time_us([&] {
               cnn::cuda::conv_relu_pool_backward_weights_mma(plan, grad_weight.get(), grad_bias.get(),
                                                              pr.d_grad_pooled.get(), winners.get(), patches.get(), n,
                                                              pr.model, false, workspace.get(), nullptr);
             }));
    }
    CNN_CHECK_CUDA(cudaDeviceSynchronize());
  }
}
