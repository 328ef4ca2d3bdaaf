// The staged inputs that the op before a staged conv writes for it in tf32 and bf16 in its forward
// (OpTensors::out_staged and pooled, kernels/cuda/device_op.hpp), each against the staging pass it
// replaces, bit for bit:
//   1. the max-pool's forward into the staged input of the conv after it, its own output and argmax
//      unchanged;
//   2. the first layer's fused conv + ReLU + pool, reading the data set, into the staged input of the
//      conv after it, its own output and winners unchanged;
//   3. a staged conv + ReLU that runs the 2x2 max-pool after it in its store (OpTensors::pooled):
//      the pool's output, argmax and staged words of the conv + ReLU and the pool's staged forward;
//   4. a staged conv's forward into the staged input of the conv or fc layer after it, its own output
//      unchanged;
// and the staging of one-pixel samples (an fc layer's rows, stage_rows_kernel) against the staging
// of two-pixel ones (stage_nhwc_kernel's transpose), pixel by pixel.
// The backward's handovers: gpu_staged_backward_handover.cpp. The whole network with these handovers
// against `seq`: gpu_precision_steps.cpp.
// With no usable GPU it prints "SKIP: ..." and exits with 77, which CTest reports as skipped.
#define BOOST_TEST_MODULE gpu_staged_handover
#include "boost_test.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cnn/choices.hpp"
#include "cnn/model.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/ops/cuda_ops.hpp"
#include "kernels/ops/layer_ops.hpp"
#include "test_util.hpp"
#include "gpu_precision_bounds.hpp"
#include "gpu_staged_tests.hpp"
#include "gpu_test_util.hpp"

using namespace cnn::precision_test;  // tests/gpu_precision_bounds.hpp
using cnn::gpu_test::poisoned;
using cnn::gpu_test::to_device;
using cnn::gpu_test::to_host;
using cnn::staged_test::head_of_vector;
using cnn::staged_test::words_of;
using cnn::cuda::DeviceBuffer;

namespace {

// What a staged conv of `shape` (and n) stages as its input from `in`, [n,H,W,Cp] words: its forward
// with the staging in (input_staged false).
std::vector<std::uint32_t> staged_input_of(const float* in, std::int64_t n, const cnn::ConvShape& shape,
                                           cnn::Precision precision) {
  const cnn::cuda::LayerPlans plans =
      cnn::cuda::plan_conv(shape, n, cnn::cuda::multiprocessor_count(), cnn::cuda::kMaxColumnFloats, precision);
  BOOST_REQUIRE(plans.staged);
  DeviceBuffer<std::uint32_t> input(plans.staged_input_words), grad(plans.staged_grad_words),
      weight(plans.staged_weight_words);
  DeviceBuffer<float> out(n * shape.out_size()), workspace(std::max<std::int64_t>(1, plans.workspace_floats()));
  const DeviceBuffer<float> w =
      to_device(cnn::test::random_vector(static_cast<std::size_t>(shape.weight_size()), 4, 0.5f));
  const DeviceBuffer<float> b = to_device(cnn::test::random_vector(static_cast<std::size_t>(shape.filters), 5, 0.5f));
  cnn::cuda::StagedBuffers staged{input.get(), grad.get(), weight.get()};
  cnn::cuda::conv2d_forward_staged(plans, out.get(), {}, in, w.get(), b.get(), n, shape, true, staged, false, false,
                                   workspace.get(), nullptr);
  return to_host(input);
}

}  // namespace

// maxpool_forward_staged: the staged words of the conv after the pool, as its forward's staging writes
// them from the pool's output, and the output and argmax of maxpool_forward, bit for bit; channels
// that fill whole tiles of 32 (64) and that do not (20, padded to 24), windows that overlap (3x3,
// stride 2) and that tile, a batch of less than one tile of windows (5) and one of many (512).
BOOST_AUTO_TEST_CASE(pool_forward_into_the_staged_input_gives_the_bits_of_the_staging) {
  for (const std::int64_t n : {5, 512})
    for (const int channels : {64, 20})
      for (const int size : {2, 3})
        for (const cnn::Precision precision : kTensorCorePrecisions) {
          const cnn::PoolShape pool{channels, 13, 13, size, 2};
          const cnn::ConvShape conv{channels, pool.out_h(), pool.out_w(), 16, 3, 1, 1};
          const int padded = cnn::cuda::staged_channels(channels, precision);
          const DeviceBuffer<float> x =
              to_device(cnn::test::random_vector(static_cast<std::size_t>(n * pool.in_size()), 6, 1.0f));
          auto pooled = poisoned<float>(n * pool.out_size()), pooled_one_pass = poisoned<float>(n * pool.out_size());
          auto argmax = poisoned<std::int32_t>(n * pool.out_size());
          auto argmax_one_pass = poisoned<std::int32_t>(n * pool.out_size());
          const std::int64_t words = words_of(n * pool.out_h() * pool.out_w(), padded, precision);
          auto one_pass = poisoned<std::uint32_t>(words);
          cnn::cuda::maxpool_forward(pooled.get(), argmax.get(), x.get(), n, pool, nullptr);
          const std::vector<std::uint32_t> want =
              head_of_vector(staged_input_of(pooled.get(), n, conv, precision), words);
          cnn::cuda::maxpool_forward_staged(pooled_one_pass.get(), argmax_one_pass.get(),
                                            {one_pass.get(), precision, padded}, x.get(), n, pool, nullptr);
          const std::vector<std::uint32_t> got = to_host(one_pass);
          BOOST_TEST_MESSAGE("pool forward into staged, batch " << n << ", " << channels << " channels, " << size << "x"
                                                                << size << ", " << cnn::precision_name(precision));
          BOOST_TEST(std::count(want.begin(), want.end(), 0u) < static_cast<std::ptrdiff_t>(want.size()) / 2);
          BOOST_TEST((got == want), "the staged words differ");
          BOOST_TEST(cnn::gpu_test::bitwise_equal(to_host(pooled_one_pass), to_host(pooled)));
          BOOST_TEST((to_host(argmax_one_pass) == to_host(argmax)));
        }
}

// conv_relu_pool_forward_from_data with a staged tensor: its pooled values staged as the next conv's
// forward stages them, bit for bit, and its pooled output and winners unchanged; 3 channels in, 32
// filters (two blocks of 16, whole chunks) and 20 (the second block short, the staged channels padded),
// a batch of 7 through shuffled indices.
BOOST_AUTO_TEST_CASE(first_layer_into_the_staged_input_gives_the_bits_of_the_staging) {
  const std::int64_t n = 7, images = 11;
  for (const int filters : {32, 20})
    for (const cnn::Precision precision : kTensorCorePrecisions) {
      cnn::SeedModel m;
      m.input = {3, 32, 32};
      m.filters = filters;
      const cnn::TensorShape p = m.pooled();
      std::mt19937 rng(3);
      const auto data =
          to_device(cnn::gpu_test::random_bytes(rng, static_cast<std::size_t>(images * m.input.size()), 256));
      const auto indices = to_device(std::vector<std::int32_t>{3, 9, 0, 10, 5, 5, 1});
      const auto weight =
          to_device(cnn::test::random_vector(static_cast<std::size_t>(filters * m.input.channels * 9), 7, 0.3f));
      const auto bias = to_device(cnn::test::random_vector(static_cast<std::size_t>(filters), 8, 0.3f));
      auto pooled = poisoned<float>(n * p.size()), pooled_one_pass = poisoned<float>(n * p.size());
      auto winners = poisoned<std::uint8_t>(n * p.size()), winners_one_pass = poisoned<std::uint8_t>(n * p.size());
      const int padded = cnn::cuda::staged_channels(filters, precision);
      const std::int64_t words = words_of(n * p.height * p.width, padded, precision);
      auto one_pass = poisoned<std::uint32_t>(words);
      cnn::cuda::conv_relu_pool_forward_from_data(pooled.get(), winners.get(), nullptr, {}, data.get(), indices.get(),
                                                  weight.get(), bias.get(), n, m, nullptr);
      cnn::cuda::conv_relu_pool_forward_from_data(pooled_one_pass.get(), winners_one_pass.get(), nullptr,
                                                  {one_pass.get(), precision, padded}, data.get(), indices.get(),
                                                  weight.get(), bias.get(), n, m, nullptr);
      const cnn::ConvShape next{filters, p.height, p.width, 16, 3, 1, 0};
      const std::vector<std::uint32_t> want =
          head_of_vector(staged_input_of(pooled.get(), n, next, precision), words);
      const std::vector<std::uint32_t> got = to_host(one_pass);
      BOOST_TEST_MESSAGE("first layer into staged, " << filters << " filters, " << cnn::precision_name(precision));
      BOOST_TEST(std::count(want.begin(), want.end(), 0u) < static_cast<std::ptrdiff_t>(want.size()) * 3 / 4);
      BOOST_TEST((got == want), "the staged words differ");
      BOOST_TEST(cnn::gpu_test::bitwise_equal(to_host(pooled_one_pass), to_host(pooled)));
      BOOST_TEST((to_host(winners_one_pass) == to_host(winners)));
    }
}

// conv2d_forward_staged_pooled: the pool's output, argmax and the staged words of the conv after it,
// as conv2d_forward_staged (ReLU, k not split) followed by maxpool_forward_staged write them, bit for
// bit, through every tile the pooled plan may take (mma.sync's with whole 32 rows per warp: one or two
// pairs of mma tiles; on sm_90a the warpgroup tiles, 16 rows per warp). Shapes: the cifar preset's
// conv2 (32 -> 64 channels, 13x13 outputs, whose last row and column no window covers), 5 -> 20
// channels with padding (filters padded to whole chunks, a 10x11 output), and 8 -> 24 at stride 2
// (9x9); batches whose windows end inside a 32-row block (5, 7) and one of many tiles (512); with and
// without a conv after the pool taking the staged words.
BOOST_AUTO_TEST_CASE(conv_with_the_pool_in_its_store_gives_the_bits_of_conv_then_pool) {
  const int multiprocessors = cnn::cuda::multiprocessor_count();
  const cnn::ConvShape shapes[] = {{32, 15, 15, 64, 3, 1, 0}, {5, 10, 11, 20, 3, 1, 1}, {8, 17, 17, 24, 3, 2, 1}};
  for (const cnn::ConvShape& shape : shapes)
    for (const std::int64_t n : {5, 7, 512})
      for (const cnn::Precision precision : kTensorCorePrecisions) {
        if (n == 512 && shape.channels != 32) continue;
        cnn::cuda::LayerPlans plans =
            cnn::cuda::plan_conv(shape, n, multiprocessors, cnn::cuda::kMaxColumnFloats, precision);
        BOOST_REQUIRE(plans.staged);
        const int positions = static_cast<int>(n * shape.out_h() * shape.out_w());
        const int k = shape.kernel * shape.kernel * cnn::cuda::staged_channels(shape.channels, precision);
        plans.forward = cnn::cuda::plan_gemm(positions, shape.filters, k, multiprocessors, false, precision);
        const cnn::PoolShape pool{shape.filters, shape.out_h(), shape.out_w(), 2, 2};
        const int windows = static_cast<int>(n * pool.out_h() * pool.out_w());
        const int padded = cnn::cuda::staged_channels(shape.filters, precision);
        const std::int64_t words = words_of(windows, padded, precision);

        const DeviceBuffer<float> x =
            to_device(cnn::test::random_vector(static_cast<std::size_t>(n * shape.in_size()), 9, 1.0f));
        const DeviceBuffer<float> w =
            to_device(cnn::test::random_vector(static_cast<std::size_t>(shape.weight_size()), 10, 0.3f));
        const DeviceBuffer<float> b =
            to_device(cnn::test::random_vector(static_cast<std::size_t>(shape.filters), 11, 0.3f));
        DeviceBuffer<std::uint32_t> input(plans.staged_input_words), grad(plans.staged_grad_words),
            weight(plans.staged_weight_words);
        const cnn::cuda::StagedBuffers staged{input.get(), grad.get(), weight.get()};

        // Two passes: the conv's output by `forward` (unsplit), then the pool's staged forward over it;
        // then every plan of `pooled_plans` in one pass must give the same bits.
        auto expect_the_bits_of_two_passes = [&](const cnn::cuda::GemmPlan& forward,
                                                 const std::vector<cnn::cuda::GemmPlan>& pooled_plans) {
          plans.forward = forward;
          auto conv_out = poisoned<float>(n * shape.out_size());
          DeviceBuffer<float> workspace(std::max<std::int64_t>(1, plans.workspace_floats()));
          cnn::cuda::conv2d_forward_staged(plans, conv_out.get(), {}, x.get(), w.get(), b.get(), n, shape, true, staged,
                                           false, false, workspace.get(), nullptr);
          auto pooled = poisoned<float>(n * pool.out_size());
          auto argmax = poisoned<std::int32_t>(n * pool.out_size());
          auto staged_words = poisoned<std::uint32_t>(words);
          cnn::cuda::maxpool_forward_staged(pooled.get(), argmax.get(), {staged_words.get(), precision, padded},
                                            conv_out.get(), n, pool, nullptr);
          const std::vector<float> want_pooled = to_host(pooled);
          const std::vector<std::int32_t> want_argmax = to_host(argmax);
          const std::vector<std::uint32_t> want_words = to_host(staged_words);
          BOOST_TEST(std::count(want_pooled.begin(), want_pooled.end(), 0.0f) <
                     static_cast<std::ptrdiff_t>(want_pooled.size()) / 4);
          for (const cnn::cuda::GemmPlan& pooled_plan : pooled_plans)
            for (const bool with_staged : {true, false}) {
              plans.pooled_forward = pooled_plan;
              auto got_pooled = poisoned<float>(n * pool.out_size());
              auto got_argmax = poisoned<std::int32_t>(n * pool.out_size());
              auto got_words = poisoned<std::uint32_t>(words);
              const cnn::cuda::StagedTensor out_staged =
                  with_staged ? cnn::cuda::StagedTensor{got_words.get(), precision, padded} : cnn::cuda::StagedTensor{};
              // The weights staged by the forward above (weights_staged, as a training step stages them at
              // its start: ProductOp::start_step) where the words are handed over, staged here otherwise.
              cnn::cuda::conv2d_forward_staged_pooled(plans, {got_pooled.get(), got_argmax.get(), out_staged}, x.get(),
                                                      w.get(), b.get(), n, shape, staged, false, with_staged, nullptr);
              const std::string what = std::to_string(shape.channels) + " -> " + std::to_string(shape.filters) +
                                       ", batch " + std::to_string(n) + ", " + cnn::precision_name(precision) + ", " +
                                       plans.pooled_forward.describe() + (with_staged ? ", staged" : "");
              BOOST_TEST_MESSAGE("conv with the pool in its store: " << what);
              BOOST_TEST(cnn::gpu_test::bitwise_equal(to_host(got_pooled), want_pooled),
                         what << ": the pooled values differ");
              BOOST_TEST((to_host(got_argmax) == want_argmax), what << ": the argmax differs");
              if (with_staged) BOOST_TEST((to_host(got_words) == want_words), what << ": the staged words differ");
            }
        };
        const int m = 32 * ((windows + 7) / 8);
        std::vector<cnn::cuda::GemmPlan> mma_plans;
        for (const cnn::cuda::MmaTile& tile : cnn::cuda::kMmaTiles)
          if (tile.holds_pool_windows())
            mma_plans.push_back(
                cnn::cuda::plan_gemm_tile(m, shape.filters, k, multiprocessors, false, precision, tile));
        expect_the_bits_of_two_passes(
            cnn::cuda::plan_gemm(positions, shape.filters, k, multiprocessors, false, precision), mma_plans);
        // The warpgroup tiles (sm_90a), 16 rows per 4 windows, against the warpgroup product unpooled:
        // the same instruction and k order.
        if (cnn::cuda::wgmma_available()) {
          const int warpgroup_m = 16 * ((windows + 3) / 4);
          std::vector<cnn::cuda::GemmPlan> warpgroup_plans;
          for (const cnn::cuda::WgmmaTile& tile : cnn::cuda::kWgmmaTiles)
            warpgroup_plans.push_back(
                cnn::cuda::plan_gemm_tile(warpgroup_m, shape.filters, k, multiprocessors, false, precision, tile));
          expect_the_bits_of_two_passes(cnn::cuda::plan_gemm_tile(positions, shape.filters, k, multiprocessors, false,
                                                                  precision, cnn::cuda::kWgmmaTiles[0]),
                                        warpgroup_plans);
          const cnn::cuda::GemmPlan planned = cnn::cuda::plan_conv_pooled(shape, n, multiprocessors, precision, true);
          BOOST_TEST((planned.m == (planned.wgmma ? warpgroup_m : m)));
        } else {
          std::printf("  (no warpgroup product on this GPU or build: its pooled tiles not checked)\n");
        }
        // The planned tile is one of those (mma.sync's where the GPU has no warpgroup product).
        BOOST_TEST(cnn::cuda::plan_conv_pooled(shape, n, multiprocessors, precision).m == m);
      }
}

// A staged conv's forward writing the staged input of the product after it beside its output
// (OpTensors::out_staged), against its fp32 output staged by the pass it replaces, bit for bit. The
// conv: 16 -> F channels, 6x6 -> 4x4; the product after it: an fc layer run as a 1x1 convolution over
// the flattened F*16 values (the cifar preset's conv3 and fc1), and a 3x3 conv over the 4x4 plane.
// F = 64 fills whole chunks, F = 20 does not in bf16 (the padding's zeros come from the store); a
// batch of 5 (the forward splits k: the sum kernel stores) and one of 300.
BOOST_AUTO_TEST_CASE(a_staged_conv_writes_the_staged_input_of_the_product_after_it) {
  const int sms = cnn::cuda::multiprocessor_count();
  for (const std::int64_t n : {5, 300})
    for (const int filters : {64, 20})
      for (const cnn::Precision precision : kTensorCorePrecisions) {
        const cnn::ConvShape conv{16, 6, 6, filters, 3, 1, 0};
        const int pixels = conv.out_h() * conv.out_w();
        struct After {
          const char* name;
          cnn::ConvShape shape;
          int pixels;  // of its input's staged layout
        };
        const After afters[] = {{"fc", {filters * pixels, 1, 1, 32, 1, 1, 0}, 1},
                                {"conv", {filters, conv.out_h(), conv.out_w(), 24, 3, 1, 1}, pixels}};
        const cnn::cuda::LayerPlans plans = cnn::cuda::plan_conv(conv, n, sms, cnn::cuda::kMaxColumnFloats, precision);
        BOOST_REQUIRE(plans.staged);
        const DeviceBuffer<float> x =
            to_device(cnn::test::random_vector(static_cast<std::size_t>(n * conv.in_size()), 12, 1.0f));
        const DeviceBuffer<float> w =
            to_device(cnn::test::random_vector(static_cast<std::size_t>(conv.weight_size()), 13, 0.3f));
        const DeviceBuffer<float> b = to_device(cnn::test::random_vector(static_cast<std::size_t>(filters), 14, 0.3f));
        DeviceBuffer<std::uint32_t> input(plans.staged_input_words), grad(plans.staged_grad_words),
            weight(plans.staged_weight_words);
        const cnn::cuda::StagedBuffers staged{input.get(), grad.get(), weight.get()};
        DeviceBuffer<float> workspace(std::max<std::int64_t>(1, plans.workspace_floats()));
        auto out = poisoned<float>(n * conv.out_size());
        cnn::cuda::conv2d_forward_staged(plans, out.get(), {}, x.get(), w.get(), b.get(), n, conv, true, staged, false,
                                         false, workspace.get(), nullptr);
        const std::vector<float> want_out = to_host(out);
        for (const After& after : afters) {
          const std::string what = std::to_string(filters) + " filters into the " + after.name + " after, batch " +
                                   std::to_string(n) + ", " + cnn::precision_name(precision) + ", forward " +
                                   plans.forward.describe();
          BOOST_TEST_MESSAGE("staged conv into the staged input after it: " << what);
          // The words the next product's staging writes from `out`.
          const int padded = cnn::cuda::staged_channels(after.shape.channels, precision);
          const std::int64_t words = words_of(n * after.pixels, padded, precision);
          const std::vector<std::uint32_t> want = head_of_vector(staged_input_of(out.get(), n, after.shape, precision),
                                                                 words);
          auto got_out = poisoned<float>(n * conv.out_size());
          auto got_words = poisoned<std::uint32_t>(words);
          cnn::cuda::conv2d_forward_staged(plans, got_out.get(), {got_words.get(), precision, padded, after.pixels},
                                           x.get(), w.get(), b.get(), n, conv, true, staged, false, true,
                                           workspace.get(), nullptr);
          BOOST_TEST(std::count(want.begin(), want.end(), 0u) < static_cast<std::ptrdiff_t>(want.size()) * 3 / 4);
          BOOST_TEST((to_host(got_words) == want), what << ": the staged input words differ");
          BOOST_TEST(cnn::gpu_test::bitwise_equal(to_host(got_out), want_out), what << ": the output differs");
        }
      }
}

// Samples of one pixel (an fc layer run as a 1x1 convolution: [n][C] rows) are staged row by row
// (stage_rows_kernel), others through a transpose (stage_nhwc_kernel): the rows' words are those the
// transpose writes for the same values at the first of two pixels, bit for bit; channels that fill
// whole chunks (1024) and that do not (20), a batch of 5 and one of 300.
BOOST_AUTO_TEST_CASE(rows_staging_gives_the_words_of_the_transposing_staging) {
  for (const std::int64_t n : {5, 300})
    for (const int channels : {1024, 20})
      for (const cnn::Precision precision : kTensorCorePrecisions) {
        // Output gradients of 1x1 convolutions over 1x1 and 1x2 images: [n, C, 1, 1] and [n, C, 1, 2].
        const cnn::ConvShape one{1, 1, 1, channels, 1, 1, 0};
        const cnn::ConvShape two{1, 1, 2, channels, 1, 1, 0};
        const int sms = cnn::cuda::multiprocessor_count();
        const cnn::cuda::LayerPlans plans_one = cnn::cuda::plan_conv(one, n, sms, cnn::cuda::kMaxColumnFloats, precision);
        const cnn::cuda::LayerPlans plans_two = cnn::cuda::plan_conv(two, n, sms, cnn::cuda::kMaxColumnFloats, precision);
        BOOST_REQUIRE(plans_one.staged);
        BOOST_REQUIRE(plans_two.staged);
        const std::vector<float> rows = cnn::test::random_vector(static_cast<std::size_t>(n * channels), 11, 1.0f);
        std::vector<float> pairs(rows.size() * 2);
        for (std::size_t e = 0; e < rows.size(); ++e) {
          pairs[2 * e] = rows[e];           // pixel 0 of (s, c)
          pairs[2 * e + 1] = -rows[e] / 3;  // pixel 1: anything else
        }
        const auto d_rows = to_device(rows);
        const auto d_pairs = to_device(pairs);
        auto words_one = poisoned<std::uint32_t>(plans_one.staged_grad_words);
        auto words_two = poisoned<std::uint32_t>(plans_two.staged_grad_words);
        cnn::cuda::StagedBuffers staged;
        staged.output_grad = words_one.get();
        cnn::cuda::conv2d_stage_backward(plans_one, d_rows.get(), n, one, staged, nullptr);
        staged.output_grad = words_two.get();
        cnn::cuda::conv2d_stage_backward(plans_two, d_pairs.get(), n, two, staged, nullptr);
        const int padded = cnn::cuda::staged_channels(channels, precision);
        const std::int64_t row_words = words_of(1, padded, precision);
        const std::vector<std::uint32_t> got = head_of_vector(to_host(words_one), n * row_words);
        const std::vector<std::uint32_t> all_two = to_host(words_two);
        std::vector<std::uint32_t> want;
        for (std::int64_t s = 0; s < n; ++s)  // pixel 0 of each sample: the first row_words of its two
          want.insert(want.end(), all_two.begin() + s * 2 * row_words, all_two.begin() + (s * 2 + 1) * row_words);
        BOOST_TEST((got == want), "batch " << n << ", " << channels << " channels, "
                                           << cnn::precision_name(precision) << ": the words differ");
      }
}
