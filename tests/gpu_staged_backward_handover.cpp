// The staged output gradients that the op after a staged conv writes for it in tf32 and bf16 in its
// backward (OpTensors::grad_in_staged, kernels/cuda/device_op.hpp), and what it reads of the conv after
// it, each against the passes it replaces, bit for bit:
//   1. the max-pool's backward into the staged output gradient of the conv before it;
//   2. the last fc layer with the loss (fc_softmax) into the staged output gradient of the fc layer
//      before it, run as a staged 1x1 convolution, its other outputs unchanged;
//   3. a staged conv's input gradient left in its split partials, which the max-pool's backward
//      before it adds (OpTensors::grad_out_partials).
// The forward's handovers: gpu_staged_handover.cpp. The whole network with these handovers against
// `seq`: gpu_precision_steps.cpp.
// With no usable GPU it prints "SKIP: ..." and exits with 77, which CTest reports as skipped.
#define BOOST_TEST_MODULE gpu_staged_backward_handover
#include "boost_test.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
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

// The max-pool's backward written straight into the staged output gradient of the conv before it
// (maxpool_backward_masked_staged, what the backend runs for conv relu maxpool2): the same words as
// maxpool_backward_masked followed by conv2d_stage_backward, bit for bit, with and without the ReLU's
// mask, for channels that fill whole chunks (64) and that do not (20), a plane (13x13) whose last
// row and column no window covers, and a batch of less than one tile of windows (5) and one of many (512).
BOOST_AUTO_TEST_CASE(pool_backward_into_the_staged_gradient_gives_the_bits_of_the_two_passes) {
  for (const std::int64_t n : {5, 512})
  for (const int channels : {64, 20})
    for (const cnn::Precision precision : kTensorCorePrecisions)
      for (const bool relu : {true, false}) {
        const cnn::ConvShape conv{3, 15, 15, channels, 3, 1, 0};  // its output: channels x 13 x 13
        const cnn::PoolShape pool{channels, 13, 13, 2, 2};
        const cnn::cuda::LayerPlans plans =
            cnn::cuda::plan_conv(conv, n, cnn::cuda::multiprocessor_count(), cnn::cuda::kMaxColumnFloats, precision);
        BOOST_REQUIRE(plans.staged);
        const std::size_t in_count = static_cast<std::size_t>(n * pool.in_size());
        const std::size_t out_count = static_cast<std::size_t>(n * pool.out_size());
        const auto x = cnn::test::random_vector(in_count, 6, 1.0f);
        const auto grad_out = cnn::test::random_vector(out_count, 7, 1.0f);
        float *d_x = nullptr, *d_pooled = nullptr, *d_grad_out = nullptr, *d_grad_in = nullptr;
        std::int32_t* d_argmax = nullptr;
        std::uint32_t *two_passes = nullptr, *one_pass = nullptr;
        CNN_CHECK_CUDA(cudaMalloc(&d_x, in_count * sizeof(float)));
        CNN_CHECK_CUDA(cudaMalloc(&d_grad_in, in_count * sizeof(float)));
        CNN_CHECK_CUDA(cudaMalloc(&d_pooled, out_count * sizeof(float)));
        CNN_CHECK_CUDA(cudaMalloc(&d_grad_out, out_count * sizeof(float)));
        CNN_CHECK_CUDA(cudaMalloc(&d_argmax, out_count * sizeof(std::int32_t)));
        CNN_CHECK_CUDA(cudaMalloc(&two_passes, plans.staged_grad_words * sizeof(std::uint32_t)));
        CNN_CHECK_CUDA(cudaMalloc(&one_pass, plans.staged_grad_words * sizeof(std::uint32_t)));
        CNN_CHECK_CUDA(cudaMemset(one_pass, 0xff, plans.staged_grad_words * sizeof(std::uint32_t)));
        CNN_CHECK_CUDA(cudaMemcpy(d_x, x.data(), in_count * sizeof(float), cudaMemcpyHostToDevice));
        CNN_CHECK_CUDA(cudaMemcpy(d_grad_out, grad_out.data(), out_count * sizeof(float), cudaMemcpyHostToDevice));
        cnn::cuda::maxpool_forward(d_pooled, d_argmax, d_x, n, pool, nullptr);
        const float* pooled = relu ? d_pooled : nullptr;
        cnn::cuda::maxpool_backward_masked(d_grad_in, d_grad_out, d_argmax, pooled, n, pool, nullptr);
        cnn::cuda::StagedBuffers staged;
        staged.output_grad = two_passes;
        cnn::cuda::conv2d_stage_backward(plans, d_grad_in, n, conv, staged, nullptr);
        const int padded = cnn::cuda::staged_channels(channels, precision);
        cnn::cuda::maxpool_backward_masked_staged({one_pass, precision, padded}, d_grad_out, {}, d_argmax, pooled, n,
                                                  pool, nullptr);
        const std::size_t words =
            static_cast<std::size_t>(n * 13 * 13 * padded / (precision == cnn::Precision::kBf16 ? 2 : 1));
        std::vector<std::uint32_t> want(words), got(words);
        CNN_CHECK_CUDA(cudaMemcpy(want.data(), two_passes, words * sizeof(std::uint32_t), cudaMemcpyDeviceToHost));
        CNN_CHECK_CUDA(cudaMemcpy(got.data(), one_pass, words * sizeof(std::uint32_t), cudaMemcpyDeviceToHost));
        for (void* p : {static_cast<void*>(d_x), static_cast<void*>(d_pooled), static_cast<void*>(d_grad_out),
                        static_cast<void*>(d_grad_in), static_cast<void*>(d_argmax), static_cast<void*>(two_passes),
                        static_cast<void*>(one_pass)})
          CNN_CHECK_CUDA(cudaFree(p));
        const auto nonzero = static_cast<std::size_t>(
            std::count_if(want.begin(), want.end(), [](std::uint32_t w) { return w != 0; }));
        BOOST_TEST_MESSAGE("pool into staged, batch " << n << ", " << channels << " channels, "
                                                << cnn::precision_name(precision)
                                                << (relu ? ", masked" : "") << ": " << nonzero << " of " << words
                                                << " words nonzero");
        BOOST_TEST(nonzero > words / 20);  // gradient did get through
        BOOST_TEST((got == want), channels << " channels, " << cnn::precision_name(precision)
                                           << (relu ? ", masked" : ", unmasked") << ": the words differ");
      }
}

// fc_softmax_cross_entropy writing its input gradient into the staged output gradient of the op
// before (NHWC [n][pixels][Cp] words: an fc layer run as a 1x1 convolution, one pixel; a conv, its
// output's pixels): the same words as its fp32 input gradient followed by conv2d_stage_backward, bit for
// bit, and the same logits, dL/dlogits, losses and hits; with and without the ReLU's mask, channels
// that fill whole chunks (64) and that do not (20, 6), one pixel and several (3x3, 4x4), a batch
// smaller than a block's warps (5) and one of many (300).
BOOST_AUTO_TEST_CASE(fused_head_into_the_staged_gradient_gives_the_bits_of_the_staging) {
  constexpr int kClasses = 10;
  struct Before {
    int channels, side;  // the op before's output: channels x side x side
  };
  for (const std::int64_t n : {5, 300})
    for (const Before shape : {Before{64, 1}, Before{20, 1}, Before{6, 4}, Before{20, 3}})
      for (const cnn::Precision precision : kTensorCorePrecisions)
        for (const bool relu : {true, false}) {
          const int pixels = shape.side * shape.side;
          const int inputs = shape.channels * pixels;
          // A 1x1 conv whose output gradient is [n, channels, side, side].
          const cnn::ConvShape before{1, shape.side, shape.side, shape.channels, 1, 1, 0};
          const cnn::cuda::LayerPlans plans = cnn::cuda::plan_conv(before, n, cnn::cuda::multiprocessor_count(),
                                                                   cnn::cuda::kMaxColumnFloats, precision);
          BOOST_REQUIRE(plans.staged);
          const auto x = to_device(cnn::test::random_vector(static_cast<std::size_t>(n * inputs), 8, 1.0f));
          const auto w = to_device(cnn::test::random_vector(static_cast<std::size_t>(kClasses * inputs), 9, 0.5f));
          const auto b = to_device(cnn::test::random_vector(kClasses, 10, 0.5f));
          std::vector<std::uint8_t> labels(static_cast<std::size_t>(n));
          for (std::size_t s = 0; s < labels.size(); ++s) labels[s] = static_cast<std::uint8_t>((s * 7 + 3) % kClasses);
          const auto d_labels = to_device(labels);
          struct Outputs {
            DeviceBuffer<float> logits, grad_logits, loss;
            DeviceBuffer<int> correct;
          };
          auto outputs = [&] {
            return Outputs{poisoned<float>(n * kClasses), poisoned<float>(n * kClasses), poisoned<float>(n),
                           poisoned<int>(n)};
          };
          auto tensors = [&](Outputs& o) {
            cnn::cuda::FcSoftmaxTensors t;
            t.in = x.get();
            t.weight = w.get();
            t.bias = b.get();
            t.labels = d_labels.get();
            t.logits = o.logits.get();
            t.grad_logits = o.grad_logits.get();
            t.mask_relu = relu;
            t.sample_loss = o.loss.get();
            t.sample_correct = o.correct.get();
            return t;
          };
          // fp32 input gradient, then the staging.
          Outputs two = outputs();
          auto grad_in = poisoned<float>(n * inputs);
          cnn::cuda::FcSoftmaxTensors t = tensors(two);
          t.grad_in = grad_in.get();
          cnn::cuda::fc_softmax_cross_entropy(t, n, inputs, 0.1f, nullptr);
          auto want_words = poisoned<std::uint32_t>(plans.staged_grad_words);
          cnn::cuda::StagedBuffers staged;
          staged.output_grad = want_words.get();
          cnn::cuda::conv2d_stage_backward(plans, grad_in.get(), n, before, staged, nullptr);
          // Straight into the staged words.
          Outputs one = outputs();
          auto got_words = poisoned<std::uint32_t>(plans.staged_grad_words);
          t = tensors(one);
          t.grad_in_staged = {got_words.get(), precision, cnn::cuda::staged_channels(shape.channels, precision),
                              pixels};
          cnn::cuda::fc_softmax_cross_entropy(t, n, inputs, 0.1f, nullptr);
          CNN_CHECK_CUDA(cudaDeviceSynchronize());
          const std::int64_t words =
              words_of(n * pixels, cnn::cuda::staged_channels(shape.channels, precision), precision);
          const std::vector<std::uint32_t> want = head_of_vector(to_host(want_words), words);
          const std::vector<std::uint32_t> got = head_of_vector(to_host(got_words), words);
          const auto nonzero = std::count_if(want.begin(), want.end(), [](std::uint32_t v) { return v != 0; });
          const std::string what = "batch " + std::to_string(n) + ", " + std::to_string(shape.channels) + "x" +
                                   std::to_string(shape.side) + "x" + std::to_string(shape.side) + " inputs, " +
                                   cnn::precision_name(precision) + (relu ? ", masked" : "");
          BOOST_TEST_MESSAGE("fc_softmax into staged, " << what << ": " << nonzero << " of " << words
                                                        << " words nonzero");
          BOOST_TEST(nonzero > words / 4, what);  // gradient did get through
          BOOST_TEST((got == want), what << ": the words differ");
          BOOST_TEST((to_host(one.logits) == to_host(two.logits)), what << ": logits");
          BOOST_TEST((to_host(one.grad_logits) == to_host(two.grad_logits)), what << ": dL/dlogits");
          BOOST_TEST((to_host(one.loss) == to_host(two.loss)), what << ": losses");
          BOOST_TEST((to_host(one.correct) == to_host(two.correct)), what << ": hits");
        }
}

// A staged conv's input gradient left in its split partials (conv_input_grad_partials), which the
// max-pool's backward before it adds in split order (OpTensors::grad_out_partials): the staged words
// of the pool's backward from the input gradient that the conv's sum kernel stores, bit for bit, with
// and without the ReLU's mask. The cifar preset's pool and conv3 (64 channels of 13x13 -> 6x6 -> 4x4),
// and 20 channels (not whole bf16 chunks), at batches whose input gradient splits 2 to 16 ways.
BOOST_AUTO_TEST_CASE(a_conv_input_gradient_in_split_partials_added_by_the_pool_before_it) {
  const int sms = cnn::cuda::multiprocessor_count();
  int cases = 0;
  for (const std::int64_t n : {5, 64, 128, 300})
    for (const int channels : {64, 20})
      for (const cnn::Precision precision : kTensorCorePrecisions)
        for (const bool relu : {true, false}) {
          const cnn::PoolShape pool{channels, 13, 13, 2, 2};
          const cnn::ConvShape before{3, 15, 15, channels, 3, 1, 0};  // the staged conv before the pool
          const cnn::ConvShape conv{channels, 6, 6, 64, 3, 1, 0};
          const cnn::cuda::LayerPlans plans = cnn::cuda::plan_conv(conv, n, sms, cnn::cuda::kMaxColumnFloats,
                                                                   precision, cnn::cuda::wgmma_available());
          const cnn::cuda::LayerPlans plans_before =
              cnn::cuda::plan_conv(before, n, sms, cnn::cuda::kMaxColumnFloats, precision);
          BOOST_REQUIRE(plans.staged);
          DeviceBuffer<float> workspace(std::max<std::int64_t>(1, plans.workspace_floats()));
          if (cnn::cuda::conv_input_grad_partials(plans, workspace.get(), n, conv).sums == nullptr) continue;
          ++cases;
          const std::string what = "batch " + std::to_string(n) + ", " + std::to_string(channels) + " channels, " +
                                   cnn::precision_name(precision) + (relu ? ", masked" : "") + ", input gradient " +
                                   plans.dgrad.describe();
          BOOST_TEST_MESSAGE("conv's input gradient in split partials into the pool before it: " << what);
          const DeviceBuffer<float> x =
              to_device(cnn::test::random_vector(static_cast<std::size_t>(n * pool.in_size()), 15, 1.0f));
          const DeviceBuffer<float> w =
              to_device(cnn::test::random_vector(static_cast<std::size_t>(conv.weight_size()), 16, 0.3f));
          const DeviceBuffer<float> grad_out =
              to_device(cnn::test::random_vector(static_cast<std::size_t>(n * conv.out_size()), 17, 1.0f));
          DeviceBuffer<float> pooled(n * pool.out_size());
          DeviceBuffer<std::int32_t> argmax(n * pool.out_size());
          cnn::cuda::maxpool_forward(pooled.get(), argmax.get(), x.get(), n, pool, nullptr);
          DeviceBuffer<std::uint32_t> input(plans.staged_input_words), grad(plans.staged_grad_words),
              weight(plans.staged_weight_words);
          const cnn::cuda::StagedBuffers staged{input.get(), grad.get(), weight.get()};
          cnn::cuda::conv2d_stage_weights(plans, w.get(), conv, staged, nullptr);
          cnn::cuda::conv2d_stage_backward(plans, grad_out.get(), n, conv, staged, nullptr);
          const int padded = cnn::cuda::staged_channels(channels, precision);
          const std::int64_t words = words_of(n * 13 * 13, padded, precision);
          BOOST_REQUIRE(plans_before.staged_grad_words >= words);
          const float* mask = relu ? pooled.get() : nullptr;
          // The sum kernel stores the input gradient; the pool's backward reads it.
          auto grad_in = poisoned<float>(n * conv.in_size());
          cnn::cuda::conv2d_backward_data_staged(plans, grad_in.get(), nullptr, n, conv, staged, workspace.get(), false,
                                                 nullptr);
          auto want = poisoned<std::uint32_t>(words);
          cnn::cuda::maxpool_backward_masked_staged({want.get(), precision, padded}, grad_in.get(), {}, argmax.get(),
                                                    mask, n, pool, nullptr);
          // The partials left in the workspace; the pool's backward adds them, and grad_in stays unwritten.
          auto untouched = poisoned<float>(n * conv.in_size());
          const std::vector<float> poison = to_host(untouched);
          cnn::cuda::conv2d_backward_data_staged(plans, untouched.get(), nullptr, n, conv, staged, workspace.get(),
                                                 true, nullptr);
          const cnn::cuda::SplitPartials partials =
              cnn::cuda::conv_input_grad_partials(plans, workspace.get(), n, conv);
          auto got = poisoned<std::uint32_t>(words);
          cnn::cuda::maxpool_backward_masked_staged({got.get(), precision, padded}, untouched.get(), partials,
                                                    argmax.get(), mask, n, pool, nullptr);
          const std::vector<std::uint32_t> want_words = to_host(want);
          BOOST_TEST(std::count(want_words.begin(), want_words.end(), 0u) <
                     static_cast<std::ptrdiff_t>(want_words.size()) * 19 / 20);  // gradient did get through
          BOOST_TEST((to_host(got) == want_words), what << ": the words differ");
          BOOST_TEST(cnn::gpu_test::bitwise_equal(to_host(untouched), poison), what << ": grad_in was written");
        }
  BOOST_TEST_MESSAGE(cases << " cases split 2 to " << cnn::cuda::kMaxSplitsAddedInOrder << " ways");
  BOOST_TEST(cases >= 4);  // the cifar preset's conv3 at batch 128 splits, in both precisions
}
