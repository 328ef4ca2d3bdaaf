// The products of --precision tf32 and bf16 (docs/PRECISION.md) alone: the staged forms the cuda
// backend runs for them, against the CPU:
//   1. shapes that are no multiple of a tile, a k step or a staged chunk: 5, 6 and 13 channels, 19
//      filters, a stride-2 conv, a 5x5 kernel: the staged forward and input gradient alone against
//      their CPU twins, within the bounds of a whole step (5e-3 tf32, 3e-2 bf16; measured: 2.6e-4
//      tf32, 2.0e-3 bf16);
//   2. the plans: fp32 never takes a tensor-core tile, tf32 and bf16 always do, and a split's k is
//      whole k tiles of the precision;
//   3. (disabled unless named: --run_test=measure_layer_products) each product of the cifar preset's
//      conv2 and conv3 timed alone, staged and element forms, with every tile.
// Whole steps through the backend against `seq`, and determinism: gpu_precision_steps.cpp. The staged
// tensors that the neighbours of a conv write for it: gpu_staged_handover.cpp.
// With no usable GPU it prints "SKIP: ..." and exits with 77, which CTest reports as skipped.
#define BOOST_TEST_MODULE gpu_precision
#include "boost_test.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cnn/choices.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/ops/layer_ops.hpp"
#include "test_util.hpp"
#include "gpu_precision_bounds.hpp"
#include "gpu_test_util.hpp"

using namespace cnn::precision_test;  // tests/gpu_precision_bounds.hpp

namespace {

// tf32 and bf16 need compute capability 8.0.
struct RequireGpu {
  RequireGpu() { cnn::gpu_test::require_gpu(8); }
};
BOOST_TEST_GLOBAL_FIXTURE(RequireGpu);

}  // namespace

BOOST_AUTO_TEST_CASE(staged_products_match_the_cpu_twins) {
  // The staged products alone, against the CPU's conv2d_forward and conv2d_backward: channels
  // padded to whole chunks (6, 19; 5, 13), a stride, a 5x5 kernel, ReLU folded into the forward and
  // the mask into the input gradient; the weight gradient with its bias. The last two take the TMA
  // input gradient too (stride 1, whole 16-word k tiles a tap): boxes of 15x8 pixels (the cifar conv2,
  // the last box half outside the plane), and of 7x7x2 with padding, 24 of 32 columns and a last box
  // of one sample.
  const cnn::ConvShape shapes[] = {
      {6, 11, 11, 19, 3, 1, 1}, {5, 12, 9, 13, 5, 2, 2}, {32, 15, 15, 64, 3, 1, 0}, {24, 7, 7, 64, 3, 1, 1}};
  const std::int64_t n = 9;
  // Each with mma.sync's plans and, where the GPU runs it (sm_90a), the warpgroup product's: planned,
  // and the forward and input gradient on every warpgroup tile (k split as the plan splits it).
  const int sms = cnn::cuda::multiprocessor_count();
  const bool wgmma = cnn::cuda::wgmma_available();
  if (!wgmma) std::printf("  (no warpgroup product on this GPU or build: mma.sync plans only)\n");
  for (const cnn::ConvShape& shape : shapes)
    for (const cnn::Precision precision : kTensorCorePrecisions) {
      std::vector<cnn::cuda::LayerPlans> variants = {
          cnn::cuda::plan_conv(shape, n, sms, cnn::cuda::kMaxColumnFloats, precision)};
      if (wgmma) {
        variants.push_back(cnn::cuda::plan_conv(shape, n, sms, cnn::cuda::kMaxColumnFloats, precision, true));
        for (const cnn::cuda::WgmmaTile& tile : cnn::cuda::kWgmmaTiles) {
          cnn::cuda::LayerPlans v = variants.front();
          v.forward = cnn::cuda::plan_gemm_tile(v.forward.m, v.forward.n, v.forward.k, sms, true, precision, tile);
          v.dgrad = cnn::cuda::plan_gemm_tile(v.dgrad.m, v.dgrad.n, v.dgrad.k, sms, true, precision, tile);
          variants.push_back(v);
        }
        const int fp_words = cnn::cuda::staged_channels(shape.filters, precision) /
                             (precision == cnn::Precision::kBf16 ? 2 : 1);
        if (shape.stride == 1 && fp_words % 16 == 0) {
          cnn::cuda::LayerPlans v = variants.front();
          v.dgrad = cnn::cuda::plan_pixel_boxes(static_cast<int>(n), shape.height, shape.width, shape.channels,
                                                v.dgrad.k, precision);
          variants.push_back(v);
        }
      }
      for (const cnn::cuda::LayerPlans& plans : variants) {
        BOOST_REQUIRE(plans.staged);
        const auto in = cnn::test::random_vector(static_cast<std::size_t>(n * shape.in_size()), 2, 1.0f);
        const auto grad_out = cnn::test::random_vector(static_cast<std::size_t>(n * shape.out_size()), 3, 1.0f);
        const auto weight = cnn::test::random_vector(static_cast<std::size_t>(shape.weight_size()), 4, 0.5f);
        const auto bias = cnn::test::random_vector(static_cast<std::size_t>(shape.filters), 5, 0.5f);
        std::vector<float> want_out(grad_out.size()), want_grad_in(in.size());
        std::vector<float> want_grad_weight(weight.size()), want_grad_bias(bias.size());
        cnn::conv2d_forward(want_out.data(), in.data(), weight.data(), bias.data(), n, shape);
        for (float& v : want_out) v = std::max(v, 0.0f);
        cnn::conv2d_backward(want_grad_in.data(), want_grad_weight.data(), want_grad_bias.data(), grad_out.data(),
                             in.data(), weight.data(), n, shape);
        for (std::size_t i = 0; i < in.size(); ++i)
          if (!(in[i] > 0.0f)) want_grad_in[i] = 0.0f;  // `in` as the ReLU output that masks it
        auto upload = [](const std::vector<float>& host) {
          float* p = nullptr;
          CNN_CHECK_CUDA(cudaMalloc(&p, std::max<std::size_t>(1, host.size()) * sizeof(float)));
          CNN_CHECK_CUDA(cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
          return p;
        };
        float* d_in = upload(in);
        float* d_grad_out = upload(grad_out);
        float* d_weight = upload(weight);
        float* d_bias = upload(bias);
        float* d_out = upload(std::vector<float>(want_out.size(), NAN));
        float* d_grad_in = upload(std::vector<float>(want_grad_in.size(), NAN));
        float* d_grad_weight = upload(std::vector<float>(weight.size(), NAN));
        float* d_grad_bias = upload(std::vector<float>(bias.size(), NAN));
        const std::int64_t workspace_floats = std::max<std::int64_t>(1, plans.workspace_floats());
        float* d_workspace = upload(std::vector<float>(static_cast<std::size_t>(workspace_floats)));
        cnn::cuda::StagedBuffers staged;
        for (auto [buffer, words] : {std::pair{&staged.input, plans.staged_input_words},
                                     std::pair{&staged.output_grad, plans.staged_grad_words},
                                     std::pair{&staged.weight, plans.staged_weight_words}})
          CNN_CHECK_CUDA(cudaMalloc(buffer, words * sizeof(std::uint32_t)));
        cnn::cuda::conv2d_forward_staged(plans, d_out, {}, d_in, d_weight, d_bias, n, shape, true, staged, false, false,
                                         d_workspace, nullptr);
        cnn::cuda::conv2d_stage_backward(plans, d_grad_out, n, shape, staged, nullptr);
        cnn::cuda::conv2d_backward_data_staged(plans, d_grad_in, d_in, n, shape, staged, d_workspace, false, nullptr);
        cnn::cuda::conv2d_backward_weights_staged(plans, d_grad_weight, d_grad_bias, n, shape, false, staged,
                                                  d_workspace, nullptr);
        auto download = [](const float* d, std::size_t count) {
          std::vector<float> host(count);
          CNN_CHECK_CUDA(cudaMemcpy(host.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost));
          return host;
        };
        const std::vector<float> got_out = download(d_out, want_out.size());
        const std::vector<float> got_grad_in = download(d_grad_in, want_grad_in.size());
        const std::vector<float> got_grad_weight = download(d_grad_weight, weight.size());
        const std::vector<float> got_grad_bias = download(d_grad_bias, bias.size());
        for (float* p : {d_in, d_grad_out, d_weight, d_bias, d_out, d_grad_in, d_grad_weight, d_grad_bias, d_workspace})
          CNN_CHECK_CUDA(cudaFree(p));
        for (std::uint32_t* p : {staged.input, staged.output_grad, staged.weight}) CNN_CHECK_CUDA(cudaFree(p));
        const double forward = relative_difference(got_out.data(), want_out.data(), want_out.size());
        const double input_grad = relative_difference(got_grad_in.data(), want_grad_in.data(), want_grad_in.size());
        const double weight_grad = relative_difference(got_grad_weight.data(), want_grad_weight.data(), weight.size());
        const double bias_grad = relative_difference(got_grad_bias.data(), want_grad_bias.data(), bias.size());
        std::printf(
            "  staged %dx%d/s%d, %d->%d channels, %s: forward %.2e (%s), input gradient %.2e (%s), weight "
            "gradient %.2e, bias %.2e (%s)\n",
            shape.kernel, shape.kernel, shape.stride, shape.channels, shape.filters, cnn::precision_name(precision),
            forward, plans.forward.describe().c_str(), input_grad, plans.dgrad.describe().c_str(), weight_grad,
            bias_grad, plans.wgrad.describe().c_str());
        BOOST_TEST(forward <= bound(precision));
        BOOST_TEST(input_grad <= bound(precision));
        BOOST_TEST(weight_grad <= bound(precision));
        BOOST_TEST(bias_grad <= bound(precision));
      }
    }
}

BOOST_AUTO_TEST_CASE(plans_take_the_precision_s_tiles) {
  const int sms = cnn::cuda::multiprocessor_count();
  for (const cnn::Precision precision : {cnn::Precision::kFp32, cnn::Precision::kTf32, cnn::Precision::kBf16})
    for (const std::int64_t n : {1, 32, 512, 2048}) {
      const cnn::cuda::LayerPlans plans = cnn::cuda::plan_conv({32, 15, 15, 64, 3, 1, 0}, n, sms,
                                                               cnn::cuda::kMaxColumnFloats, precision);
      BOOST_TEST(plans.staged == (precision != cnn::Precision::kFp32));
      for (const cnn::cuda::GemmPlan* plan : {&plans.forward, &plans.dgrad, &plans.wgrad}) {
        BOOST_TEST(std::string(cnn::precision_name(plan->precision)) == cnn::precision_name(precision));
        BOOST_TEST(plan->tensor_cores() == (precision != cnn::Precision::kFp32));
        BOOST_TEST(plan->k_per_split % plan->k_tile() == 0);
        BOOST_TEST(std::int64_t{plan->splits} * plan->k_per_split >= plan->k);
        BOOST_TEST(std::int64_t{plan->splits - 1} * plan->k_per_split < plan->k);
      }
    }
}

BOOST_AUTO_TEST_CASE(warpgroup_plans_where_they_fill_the_gpu) {
  // The planner alone (no launch), for the 132 multiprocessors of an H100 SXM: the cifar preset's conv2
  // (15x15 pixels, 32 channels, 64 filters) and conv3 (6x6, 64 -> 64), as measured and recorded in
  // docs/PERFORMANCE.md (the eleventh part).
  const int sms = 132;
  const cnn::ConvShape conv2{32, 15, 15, 64, 3, 1, 0}, conv3{64, 6, 6, 64, 3, 1, 0};
  for (const cnn::Precision p : kTensorCorePrecisions) {
    auto plans = [&](const cnn::ConvShape& s, std::int64_t n, bool wgmma) {
      return cnn::cuda::plan_conv(s, n, sms, cnn::cuda::kMaxColumnFloats, p, wgmma);
    };
    for (const std::int64_t n : {128, 512, 2048}) {
      // conv2's input gradient: TMA boxes of 15x8 pixels (2 a sample: n * 2 >= 132 blocks), unsplit.
      const cnn::cuda::GemmPlan dgrad = plans(conv2, n, true).dgrad;
      BOOST_TEST(dgrad.tma());
      BOOST_TEST((dgrad.box_w == 15 && dgrad.box_h == 8 && dgrad.box_s == 1 && dgrad.boxes == 2 * n));
      BOOST_TEST(dgrad.splits == 1);
      BOOST_TEST(dgrad.workspace_floats() == 0);
      // Without the warpgroup product: mma.sync's, whatever the batch.
      BOOST_TEST(!plans(conv2, n, false).dgrad.wgmma);
      BOOST_TEST(!plans(conv2, n, false).forward.wgmma);
    }
    // conv3's input gradient: TMA from batch 512 (3 samples a box: 171 boxes), the chunk form's
    // warpgroup tile or mma.sync's below, whichever fills the GPU better; at batch 32 mma.sync's (the
    // warpgroup tile would put 81 blocks where mma.sync puts 288).
    BOOST_TEST(plans(conv3, 512, true).dgrad.tma());
    BOOST_TEST(!plans(conv3, 128, true).dgrad.tma());
    BOOST_TEST(!plans(conv3, 32, true).dgrad.wgmma);
    // conv3's forward splits k at every batch with a warpgroup tile: mma.sync's.
    for (const std::int64_t n : {32, 128, 512, 2048}) BOOST_TEST(!plans(conv3, n, true).forward.wgmma);
    // conv2's forward with the max-pool in its store: the warpgroup tile 128x64 (16 rows per 4 windows)
    // from batch 512, where it fills the GPU as well as mma.sync's 64x64; mma.sync's below.
    for (const std::int64_t n : {512, 2048}) {
      const cnn::cuda::GemmPlan pooled = cnn::cuda::plan_conv_pooled(conv2, n, sms, p, true);
      BOOST_TEST((pooled.wgmma && pooled.bm == 128 && pooled.bn == 64 && pooled.splits == 1 &&
                  pooled.m == 16 * n * 36 / 4));
    }
    for (const std::int64_t n : {32, 128}) BOOST_TEST(!cnn::cuda::plan_conv_pooled(conv2, n, sms, p, true).wgmma);
    BOOST_TEST(!cnn::cuda::plan_conv_pooled(conv2, 2048, sms, p, false).wgmma);
    // An unpooled conv2 forward at 2048 (m = 346112): the warpgroup tile 128x64, unsplit.
    const cnn::cuda::GemmPlan forward = plans(conv2, 2048, true).forward;
    BOOST_TEST((forward.wgmma && forward.bm == 128 && forward.bn == 64 && forward.splits == 1));
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

float* device_random(std::int64_t count, std::uint32_t seed) {
  const std::vector<float> host = cnn::test::random_vector(static_cast<std::size_t>(count), seed, 1.0f);
  float* p = nullptr;
  CNN_CHECK_CUDA(cudaMalloc(&p, host.size() * sizeof(float)));
  CNN_CHECK_CUDA(cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return p;
}

}  // namespace

// Each product of the cifar preset's conv2 and conv3 (on 3x32x32 input) alone, at batch 128, 512
// and 2048, in each precision, in microseconds and TFLOP/s (2*M*N*K of the layer, whatever the
// padding): in tf32 and bf16 the staged forms against the element forms, with every tile and warp
// layout of kMmaTiles (plan_gemm_tile) at 512 and 2048. The forward's time includes its staging; the backward's staging
// is timed on its own line.
//   ./gpu_precision --run_test=measure_layer_products
BOOST_AUTO_TEST_CASE(measure_layer_products, *boost::unit_test::disabled() * boost::unit_test::label("measurement")) {
  struct Layer {
    const char* name;
    cnn::ConvShape shape;
  };
  const Layer layers[] = {{"conv2", {32, 15, 15, 64, 3, 1, 0}}, {"conv3", {64, 6, 6, 64, 3, 1, 0}}};
  const int sms = cnn::cuda::multiprocessor_count();
  std::printf("%-6s %5s %-5s %-40s %9s %8s\n", "layer", "n", "prec", "product (launch)", "us", "TFLOP/s");
  for (const Layer& layer : layers)
    for (const std::int64_t n : {128, 512, 2048}) {
      const cnn::ConvShape& s = layer.shape;
      float* in = device_random(n * s.in_size(), 1);
      float* weight = device_random(s.weight_size(), 2);
      float* bias = device_random(s.filters, 3);
      float* grad_out = device_random(n * s.out_size(), 4);
      float *out = nullptr, *grad_in = nullptr, *grad_weight = nullptr, *grad_bias = nullptr, *workspace = nullptr;
      CNN_CHECK_CUDA(cudaMalloc(&out, n * s.out_size() * sizeof(float)));
      CNN_CHECK_CUDA(cudaMalloc(&grad_in, n * s.in_size() * sizeof(float)));
      CNN_CHECK_CUDA(cudaMalloc(&grad_weight, s.weight_size() * sizeof(float)));
      CNN_CHECK_CUDA(cudaMalloc(&grad_bias, s.filters * sizeof(float)));
      const std::int64_t workspace_floats = std::int64_t{1} << 28;  // 1 GiB: any plan's split-K or columns
      CNN_CHECK_CUDA(cudaMalloc(&workspace, workspace_floats * sizeof(float)));
      cnn::cuda::StagedBuffers staged;  // room for tf32, channels padded
      CNN_CHECK_CUDA(cudaMalloc(&staged.input, 2 * n * s.in_size() * sizeof(float)));
      CNN_CHECK_CUDA(cudaMalloc(&staged.output_grad, 2 * n * s.out_size() * sizeof(float)));
      CNN_CHECK_CUDA(cudaMalloc(&staged.weight, 4 * s.weight_size() * sizeof(float)));
      const double flops = 2.0 * n * s.out_h() * s.out_w() * s.filters * s.channels * s.kernel * s.kernel;
      const int positions = static_cast<int>(n * s.out_h() * s.out_w());
      const int pixels = static_cast<int>(n * s.height * s.width);
      const int taps = s.channels * s.kernel * s.kernel;
      const bool sweep = n >= 512;
      auto report = [&](cnn::Precision p, const std::string& what, double us) {
        std::printf("%-6s %5lld %-5s %-40s %9.1f %8.2f\n", layer.name, static_cast<long long>(n),
                    cnn::precision_name(p), what.c_str(), us, flops / us * 1e-6);
      };
      for (const cnn::Precision p : {cnn::Precision::kFp32, cnn::Precision::kTf32, cnn::Precision::kBf16}) {
        const cnn::cuda::LayerPlans plans = cnn::cuda::plan_conv(s, n, sms, cnn::cuda::kMaxColumnFloats, p);
        if (p == cnn::Precision::kFp32) {
          report(p, "forward (" + plans.forward.describe() + ")", time_us([&] {
                   cnn::cuda::conv2d_forward_planned(plans.forward, out, in, weight, bias, n, s, true, workspace, nullptr);
                 }));
          report(p, std::string("dgrad ") + (plans.dgrad_by_columns ? "columns" : "direct") + " (" +
                        plans.dgrad.describe() + ")", time_us([&] {
                   cnn::cuda::conv2d_backward_data(plans, grad_in, grad_out, weight, in, n, s, workspace, nullptr);
                 }));
          report(p, "wgrad (" + plans.wgrad.describe() + ")", time_us([&] {
                   cnn::cuda::conv2d_backward_weights(plans.wgrad, grad_weight, grad_bias, grad_out, in, n, s, false,
                                                      workspace, nullptr);
                 }));
          continue;
        }
        // The element forms in this precision (what the op ran before the staged forms).
        cnn::cuda::LayerPlans element;
        element.forward = cnn::cuda::plan_gemm(positions, s.filters, taps, sms, true, p);
        element.dgrad = cnn::cuda::plan_gemm(pixels, s.channels, s.filters * s.kernel * s.kernel, sms, true, p);
        element.wgrad = cnn::cuda::plan_gemm(s.filters, taps + 1, positions, sms, true, p);
        report(p, "forward element (" + element.forward.describe() + ")", time_us([&] {
                 cnn::cuda::conv2d_forward_planned(element.forward, out, in, weight, bias, n, s, true, workspace, nullptr);
               }));
        report(p, "dgrad element direct (" + element.dgrad.describe() + ")", time_us([&] {
                 cnn::cuda::conv2d_backward_data(element, grad_in, grad_out, weight, in, n, s, workspace, nullptr);
               }));
        report(p, "wgrad element (" + element.wgrad.describe() + ")", time_us([&] {
                 cnn::cuda::conv2d_backward_weights(element.wgrad, grad_weight, grad_bias, grad_out, in, n, s, false,
                                                    workspace, nullptr);
               }));
        report(p, "stage backward (grad_out)", time_us([&] {
                 cnn::cuda::conv2d_stage_backward(plans, grad_out, n, s, staged, nullptr);
               }));
        std::vector<std::pair<std::string, cnn::cuda::LayerPlans>> variants = {{"planned", plans}};
        if (sweep)
          for (const cnn::cuda::MmaTile& tile : cnn::cuda::kMmaTiles) {
            cnn::cuda::LayerPlans v = plans;
            v.forward =
                cnn::cuda::plan_gemm_tile(plans.forward.m, plans.forward.n, plans.forward.k, sms, true, p, tile);
            v.dgrad = cnn::cuda::plan_gemm_tile(plans.dgrad.m, plans.dgrad.n, plans.dgrad.k, sms, true, p, tile);
            v.wgrad = cnn::cuda::plan_gemm_tile(plans.wgrad.m, plans.wgrad.n, plans.wgrad.k, sms, true, p, tile);
            // 64x128, or 128x64/2x2 where the tile is not 8 warps (kernels/bench/products_ab_device_run.sh
            // matches these names between trees).
            std::string name = std::to_string(tile.bm) + "x" + std::to_string(tile.bn);
            if (tile.threads() != cnn::cuda::kMmaThreads)
              name += "/" + std::to_string(tile.warps_m) + "x" + std::to_string(tile.warps_n);
            variants.emplace_back(name, v);
          }
        if (cnn::cuda::wgmma_available()) {
          // The planned warpgroup products, then (sweep) every warpgroup tile for the forward and input gradient.
          const cnn::cuda::LayerPlans warpgroup = cnn::cuda::plan_conv(s, n, sms, cnn::cuda::kMaxColumnFloats, p, true);
          variants.emplace_back("wgmma", warpgroup);
          // The input gradient's TMA form against its chunk form, both planned.
          cnn::cuda::LayerPlans boxes = warpgroup, chunks = warpgroup;
          boxes.dgrad = cnn::cuda::plan_pixel_boxes(static_cast<int>(n), s.height, s.width, s.channels,
                                                    warpgroup.dgrad.k, p);
          chunks.dgrad = cnn::cuda::plan_input_gradient(warpgroup.dgrad.m, warpgroup.dgrad.n, warpgroup.dgrad.k, sms,
                                                        p, true);
          variants.emplace_back("wgmma tma", boxes);
          variants.emplace_back("wgmma chunks", chunks);
          if (sweep)
            for (const cnn::cuda::WgmmaTile& tile : cnn::cuda::kWgmmaTiles) {
              cnn::cuda::LayerPlans v = plans;
              v.forward =
                  cnn::cuda::plan_gemm_tile(plans.forward.m, plans.forward.n, plans.forward.k, sms, true, p, tile);
              v.dgrad = cnn::cuda::plan_gemm_tile(plans.dgrad.m, plans.dgrad.n, plans.dgrad.k, sms, true, p, tile);
              variants.emplace_back("wgmma " + std::to_string(tile.bm) + "x" + std::to_string(tile.bn), v);
            }
        }
        for (const auto& [name, v] : variants)
          report(p, "forward staged " + name + " (" + v.forward.describe() + ")", time_us([&] {
                   cnn::cuda::conv2d_forward_staged(v, out, {}, in, weight, bias, n, s, true, staged, false, false,
                                                    workspace, nullptr);
                 }));
        for (const auto& [name, v] : variants)
          report(p, "dgrad staged " + name + " (" + v.dgrad.describe() + ")", time_us([&] {
                   cnn::cuda::conv2d_backward_data_staged(v, grad_in, in, n, s, staged, workspace, false, nullptr);
                 }));
        for (const auto& [name, v] : variants)
          report(p, "wgrad staged " + name + " (" + v.wgrad.describe() + ")", time_us([&] {
                   cnn::cuda::conv2d_backward_weights_staged(v, grad_weight, grad_bias, n, s, false, staged, workspace,
                                                             nullptr);
                 }));
        std::fflush(stdout);
      }
      for (float* ptr : {in, weight, bias, grad_out, out, grad_in, grad_weight, grad_bias, workspace})
        CNN_CHECK_CUDA(cudaFree(ptr));
      for (std::uint32_t* ptr : {staged.input, staged.output_grad, staged.weight}) CNN_CHECK_CUDA(cudaFree(ptr));
    }
}
