// Every tensor-core tile of kMmaTiles (gemm_plan.hpp) gives the planned tile's bits, in tf32 and
// bf16: the staged conv products (the cp.async pipeline with its chunk cursors, conv_chunk_loaders.cuh)
// and the fc products (the element pipeline). Each output's sum runs over the k tiles in order and
// each tile's mma k steps in order, whatever the block tile and whichever warp holds the output, so
// with the same split of k (kept from the plan) every tile must write the same words. This is what
// lets the planner change a layer's tile (kMmaTiles' order, measured) without changing a run's
// bits, and it checks the 4-warp tiles and the shapes the planner does not pick: channels that fill
// no whole chunk (5, 6, 13, 19), stride 2, a 5x5 kernel, sizes no multiple of any tile, a split k.
// On sm_90a every warpgroup tile of kWgmmaTiles gives one set of bits too (the forward and the input
// gradient). The planned tiles themselves are checked against the CPU twins in gpu_precision.
// With no usable GPU it prints "SKIP: ..." and exits with 77, which CTest reports as skipped.
#define BOOST_TEST_MODULE gpu_mma_tiles
#include "boost_test.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/ops/layer_ops.hpp"
#include "test_util.hpp"
#include "gpu_test_util.hpp"

namespace {

struct RequireGpu {
  RequireGpu() { cnn::gpu_test::require_gpu(8); }
};
BOOST_TEST_GLOBAL_FIXTURE(RequireGpu);

constexpr cnn::Precision kTensorCorePrecisions[] = {cnn::Precision::kTf32, cnn::Precision::kBf16};

// A device buffer of floats, freed on scope exit.
struct DeviceFloats {
  float* data = nullptr;
  std::size_t count = 0;
  explicit DeviceFloats(const std::vector<float>& host) : count(host.size()) {
    CNN_CHECK_CUDA(cudaMalloc(&data, std::max<std::size_t>(1, count) * sizeof(float)));
    CNN_CHECK_CUDA(cudaMemcpy(data, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  ~DeviceFloats() { cudaFree(data); }
  // Fills with NaN, so that an output a kernel leaves unwritten cannot match.
  void poison() { CNN_CHECK_CUDA(cudaMemset(data, 0xFF, count * sizeof(float))); }
  std::vector<float> download() const {
    std::vector<float> host(count);
    CNN_CHECK_CUDA(cudaMemcpy(host.data(), data, count * sizeof(float), cudaMemcpyDeviceToHost));
    return host;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

// Room for any of the plans' split-K sums (at least one float).
std::vector<float> workspace_for(const cnn::cuda::LayerPlans& plans) {
  return std::vector<float>(static_cast<std::size_t>(std::max<std::int64_t>(1, plans.workspace_floats())));
}

// `plan` with `tile`'s block and warps, the split of k kept (a TMA plan's, unsplit, becomes the chunk
// form's).
cnn::cuda::GemmPlan with_tile(cnn::cuda::GemmPlan plan, const cnn::cuda::MmaTile& tile) {
  plan.bm = tile.bm;
  plan.bn = tile.bn;
  plan.warps_m = tile.warps_m;
  plan.warps_n = tile.warps_n;
  plan.wgmma = false;
  plan.boxes = 0;
  return plan;
}
// The same with a warpgroup tile (wgmma_gemm.cuh).
cnn::cuda::GemmPlan with_tile(cnn::cuda::GemmPlan plan, const cnn::cuda::WgmmaTile& tile) {
  plan.bm = tile.bm;
  plan.bn = tile.bn;
  plan.warps_m = tile.bm / 16;
  plan.warps_n = 1;
  plan.wgmma = true;
  plan.boxes = 0;
  return plan;
}

// Runs the layer's four products with its own plans, then with every tile of kMmaTiles in their place
// (the split of k kept): each tile must write the planned tile's words. `run(plans)` returns the
// forward output, input gradient, weight gradient and bias gradient; `what` names the case.
template <class Run>
void expect_every_tile_to_give_the_planned_bits(const cnn::cuda::LayerPlans& plans, Run&& run, const std::string& what) {
  const auto want = run(plans);
  for (const auto& v : want) BOOST_REQUIRE(all_finite(v));
  for (const cnn::cuda::MmaTile& tile : cnn::cuda::kMmaTiles) {
    cnn::cuda::LayerPlans v = plans;
    v.forward = with_tile(plans.forward, tile);
    v.dgrad = with_tile(plans.dgrad, tile);
    v.wgrad = with_tile(plans.wgrad, tile);
    const auto got = run(v);
    const char* names[] = {"forward", "input gradient", "weight gradient", "bias gradient"};
    const cnn::cuda::GemmPlan* used[] = {&v.forward, &v.dgrad, &v.wgrad, &v.wgrad};
    const cnn::cuda::GemmPlan* planned[] = {&plans.forward, &plans.dgrad, &plans.wgrad, &plans.wgrad};
    for (int i = 0; i < 4; ++i)
      BOOST_TEST(same_bits(got[i], want[i]),
                 names[i] << " " << used[i]->describe() << " (planned " << planned[i]->describe() << "), " << what);
  }
}

// The same for the warpgroup tiles (wgmma_gemm.cuh) on the forward and the input gradient, with the
// plans' split of k (plan_conv with wgmma): every tile of kWgmmaTiles gives the first one's bits
// (mma.sync's are other bits: wgmma adds its k step in its own order).
template <class Run>
void expect_every_warpgroup_tile_to_give_the_same_bits(const cnn::cuda::LayerPlans& plans, Run&& run,
                                                       const std::string& what) {
  cnn::cuda::LayerPlans first = plans;
  first.forward = with_tile(plans.forward, cnn::cuda::kWgmmaTiles[0]);
  first.dgrad = with_tile(plans.dgrad, cnn::cuda::kWgmmaTiles[0]);
  const auto want = run(first);
  for (const auto& v : want) BOOST_REQUIRE(all_finite(v));
  for (const cnn::cuda::WgmmaTile& tile : cnn::cuda::kWgmmaTiles) {
    cnn::cuda::LayerPlans v = plans;
    v.forward = with_tile(plans.forward, tile);
    v.dgrad = with_tile(plans.dgrad, tile);
    const auto got = run(v);
    BOOST_TEST(same_bits(got[0], want[0]),
               "forward " << v.forward.describe() << " (against " << first.forward.describe() << "), " << what);
    BOOST_TEST(same_bits(got[1], want[1]),
               "input gradient " << v.dgrad.describe() << " (against " << first.dgrad.describe() << "), " << what);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_tile_gives_the_planned_tile_s_bits_in_the_staged_conv_products) {
  struct Case {
    cnn::ConvShape shape;
    std::int64_t n;
  };
  // cifar's conv2; odd channels and filters with padding; stride 2 with a 5x5 kernel; batch 300 for
  // M past several 256-row tiles and a longer k (the weight gradient's k is the positions); 24 channels
  // with padding, whose TMA input gradient takes boxes of two 7x7 samples.
  const Case cases[] = {{{32, 15, 15, 64, 3, 1, 0}, 7},
                        {{6, 11, 11, 19, 3, 1, 1}, 9},
                        {{5, 12, 9, 13, 5, 2, 2}, 9},
                        {{13, 7, 7, 20, 3, 1, 1}, 300},
                        {{24, 7, 7, 64, 3, 1, 1}, 9}};
  const int sms = cnn::cuda::multiprocessor_count();
  for (const Case& c : cases)
    for (const cnn::Precision precision : kTensorCorePrecisions) {
      const cnn::ConvShape& s = c.shape;
      const cnn::cuda::LayerPlans plans =
          cnn::cuda::plan_conv(s, c.n, sms, cnn::cuda::kMaxColumnFloats, precision);
      BOOST_REQUIRE(plans.staged);
      DeviceFloats in(cnn::test::random_vector(static_cast<std::size_t>(c.n * s.in_size()), 2, 1.0f));
      DeviceFloats grad_out(cnn::test::random_vector(static_cast<std::size_t>(c.n * s.out_size()), 3, 1.0f));
      DeviceFloats weight(cnn::test::random_vector(static_cast<std::size_t>(s.weight_size()), 4, 0.5f));
      DeviceFloats bias(cnn::test::random_vector(static_cast<std::size_t>(s.filters), 5, 0.5f));
      DeviceFloats out(std::vector<float>(static_cast<std::size_t>(c.n * s.out_size())));
      DeviceFloats grad_in(std::vector<float>(static_cast<std::size_t>(c.n * s.in_size())));
      DeviceFloats grad_weight(std::vector<float>(static_cast<std::size_t>(s.weight_size())));
      DeviceFloats grad_bias(std::vector<float>(static_cast<std::size_t>(s.filters)));
      const bool wgmma = cnn::cuda::wgmma_available();
      const cnn::cuda::LayerPlans warpgroup =
          cnn::cuda::plan_conv(s, c.n, sms, cnn::cuda::kMaxColumnFloats, precision, wgmma);
      DeviceFloats workspace(workspace_for(warpgroup.workspace_floats() > plans.workspace_floats() ? warpgroup : plans));
      cnn::cuda::StagedBuffers staged;
      for (auto [buffer, words] : {std::pair{&staged.input, plans.staged_input_words},
                                   std::pair{&staged.output_grad, plans.staged_grad_words},
                                   std::pair{&staged.weight, plans.staged_weight_words}})
        CNN_CHECK_CUDA(cudaMalloc(buffer, words * sizeof(std::uint32_t)));
      // forward (with ReLU), input gradient (masked by `in`), weight and bias gradients.
      auto run = [&](const cnn::cuda::LayerPlans& p) {
        for (DeviceFloats* d : {&out, &grad_in, &grad_weight, &grad_bias}) d->poison();
        cnn::cuda::conv2d_forward_staged(p, out.data, {}, in.data, weight.data, bias.data, c.n, s, true, staged, false,
                                         false, workspace.data, nullptr);
        cnn::cuda::conv2d_stage_backward(p, grad_out.data, c.n, s, staged, nullptr);
        cnn::cuda::conv2d_backward_data_staged(p, grad_in.data, in.data, c.n, s, staged, workspace.data, false,
                                               nullptr);
        cnn::cuda::conv2d_backward_weights_staged(p, grad_weight.data, grad_bias.data, c.n, s, false, staged,
                                                  workspace.data, nullptr);
        CNN_CHECK_CUDA(cudaDeviceSynchronize());
        return std::vector<std::vector<float>>{out.download(), grad_in.download(), grad_weight.download(),
                                               grad_bias.download()};
      };
      const std::string what = std::to_string(s.channels) + "->" + std::to_string(s.filters) + " " +
                               std::to_string(s.kernel) + "x" + std::to_string(s.kernel) + "/s" +
                               std::to_string(s.stride) + ", n " + std::to_string(c.n);
      expect_every_tile_to_give_the_planned_bits(plans, run, what);
      if (wgmma) {
        expect_every_warpgroup_tile_to_give_the_same_bits(warpgroup, run, what);
        // The TMA input gradient (stride 1, whole 16-word k tiles a tap) gives the chunk form's
        // warpgroup bits with k unsplit.
        const int fp_words =
            cnn::cuda::staged_channels(s.filters, precision) / (precision == cnn::Precision::kBf16 ? 2 : 1);
        if (s.stride == 1 && fp_words % 16 == 0) {
          cnn::cuda::LayerPlans unsplit = warpgroup, boxes = warpgroup;
          boxes.dgrad = cnn::cuda::plan_pixel_boxes(static_cast<int>(c.n), s.height, s.width, s.channels,
                                                    warpgroup.dgrad.k, precision);
          unsplit.dgrad = cnn::cuda::plan_gemm_tile(warpgroup.dgrad.m, warpgroup.dgrad.n, warpgroup.dgrad.k, sms,
                                                    false, precision, cnn::cuda::WgmmaTile{128, boxes.dgrad.bn});
          const auto want = run(unsplit);
          const auto got = run(boxes);
          BOOST_TEST(all_finite(got[1]));
          BOOST_TEST(same_bits(got[1], want[1]),
                     "input gradient " << boxes.dgrad.describe() << " (against " << unsplit.dgrad.describe() << "), "
                                       << what);
        }
      } else {
        std::printf("  (no warpgroup product on this GPU or build: its tiles not checked)\n");
      }
      for (std::uint32_t* p : {staged.input, staged.output_grad, staged.weight}) CNN_CHECK_CUDA(cudaFree(p));
    }
}

BOOST_AUTO_TEST_CASE(every_tile_gives_the_planned_tile_s_bits_in_the_fc_products) {
  // 37 -> 19 features at batch 300 and 1024 -> 64 at batch 65: no multiple of any tile, split k.
  struct Case {
    std::int64_t in_features, out_features, n;
  };
  const Case cases[] = {{37, 19, 300}, {1024, 64, 65}};
  const int sms = cnn::cuda::multiprocessor_count();
  for (const Case& c : cases)
    for (const cnn::Precision precision : kTensorCorePrecisions) {
      const cnn::cuda::LayerPlans plans = cnn::cuda::plan_fc(c.in_features, c.out_features, c.n, sms, precision);
      DeviceFloats in(cnn::test::random_vector(static_cast<std::size_t>(c.n * c.in_features), 6, 1.0f));
      DeviceFloats grad_out(cnn::test::random_vector(static_cast<std::size_t>(c.n * c.out_features), 7, 1.0f));
      DeviceFloats weight(cnn::test::random_vector(static_cast<std::size_t>(c.out_features * c.in_features), 8, 0.5f));
      DeviceFloats bias(cnn::test::random_vector(static_cast<std::size_t>(c.out_features), 9, 0.5f));
      DeviceFloats out(std::vector<float>(static_cast<std::size_t>(c.n * c.out_features)));
      DeviceFloats grad_in(std::vector<float>(static_cast<std::size_t>(c.n * c.in_features)));
      DeviceFloats grad_weight(std::vector<float>(static_cast<std::size_t>(c.out_features * c.in_features)));
      DeviceFloats grad_bias(std::vector<float>(static_cast<std::size_t>(c.out_features)));
      DeviceFloats workspace(workspace_for(plans));
      auto run = [&](const cnn::cuda::LayerPlans& p) {
        for (DeviceFloats* d : {&out, &grad_in, &grad_weight, &grad_bias}) d->poison();
        cnn::cuda::fc_forward_planned(p.forward, out.data, in.data, weight.data, bias.data, c.n, c.in_features,
                                      c.out_features, true, workspace.data, nullptr);
        cnn::cuda::fc_backward_data(p.dgrad, grad_in.data, grad_out.data, weight.data, in.data, c.n, c.in_features,
                                    c.out_features, workspace.data, nullptr);
        cnn::cuda::fc_backward_weights(p.wgrad, grad_weight.data, grad_bias.data, grad_out.data, in.data, c.n,
                                       c.in_features, c.out_features, false, workspace.data, nullptr);
        CNN_CHECK_CUDA(cudaDeviceSynchronize());
        return std::vector<std::vector<float>>{out.download(), grad_in.download(), grad_weight.download(),
                                               grad_bias.download()};
      };
      expect_every_tile_to_give_the_planned_bits(
          plans, run,
          std::to_string(c.in_features) + "->" + std::to_string(c.out_features) + ", n " + std::to_string(c.n));
    }
}

BOOST_AUTO_TEST_CASE(plans_of_every_tile_name_it_and_keep_whole_k_tiles) {
  const int sms = cnn::cuda::multiprocessor_count();
  std::vector<std::string> names;
  for (const cnn::cuda::MmaTile& tile : cnn::cuda::kMmaTiles) {
    const cnn::cuda::GemmPlan plan =
        cnn::cuda::plan_gemm_tile(169 * 512, 64, 288, sms, true, cnn::Precision::kBf16, tile);
    BOOST_TEST(plan.threads() == tile.threads());
    BOOST_TEST(plan.k_per_split % plan.k_tile() == 0);
    BOOST_TEST(std::int64_t{plan.splits} * plan.k_per_split >= plan.k);
    names.push_back(plan.describe());
  }
  for (std::size_t i = 0; i < names.size(); ++i)
    for (std::size_t j = i + 1; j < names.size(); ++j) BOOST_TEST(names[i] != names[j]);
}
