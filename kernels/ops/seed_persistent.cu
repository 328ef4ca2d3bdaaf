// The persistent seed kernel: see seed_persistent.hpp for the ownership of the work and the phases of
// a step, seed_persistent_phases.cuh for the phases themselves. Here: the kernel's loop over steps and
// its barriers, and the host side (the plan, what it refuses, the cooperative launch).
#include <cooperative_groups.h>

#include <algorithm>

#include "cuda/cuda_check.hpp"
#include "cuda/launch.hpp"
#include "ops/nonfinite.cuh"
#include "ops/seed_persistent.hpp"
#include "ops/seed_persistent_exchange.cuh"
#include "ops/seed_persistent_phases.cuh"

namespace cnn::cuda {
namespace {

namespace cg = cooperative_groups;

using namespace persistent;  // seed_persistent_phases.cuh

__global__ void __launch_bounds__(kThreads, 1) seed_persistent_kernel(SeedPersistentArgs a, Shape s) {
  extern __shared__ float4 shared_words[];
  float* smem = reinterpret_cast<float*>(shared_words);
  const SharedLayout l = shared_layout(s);
  const Ownership own = ownership(static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x), s.columns, s.filters);
  const cg::grid_group grid = cg::this_grid();
  const bool clock_keeper = blockIdx.x == 0 && threadIdx.x == 0;
  const bool exchange = a.peers.ranks > 1;
  unsigned int epoch = exchange_epoch_at_start(a.peers);
  load_parameters(a, s, own, smem, l, a.rules[0].kind);
  __syncthreads();

  int step = 0;
  for (; step < a.steps; ++step) {
    // The host's stop word, read at the step's start and published before its last barrier: the
    // read crosses PCIe (a microsecond or more), and the forward runs while it is in flight.
    const int host_stop = clock_keeper && a.host_stop != nullptr ? *a.host_stop : 0;
    if (clock_keeper) a.clocks[step * 4] = global_ns();
    forward_phase(a, s, own, smem, l, step);
    grid.sync();
    // Every block read the last step's verdict before this barrier: reset it for this step.
    if (clock_keeper) *a.verdict = kAllFinite;
    loss_phase(a, s, smem, l, step);
    grid.sync();
    if (clock_keeper) a.clocks[step * 4 + 1] = global_ns();
    backward_phase(a, s, own, smem, l, step);
    if (exchange) send_owned_columns(a, own, smem, l, epoch + 1);  // in flight during the barrier and D
    grid.sync();
    reduce_phase(a, s, step);
    if (exchange) {
      // The sum over ranks, of what this block owns and has just reduced; the stop word travels with
      // it, so every rank stops at the same step.
      exchange_phase(a, s, own, smem, l, ++epoch, host_stop);
    } else if (host_stop != 0) {
      *a.stop_request = 1;
    }
    grid.sync();
    if (clock_keeper) a.clocks[step * 4 + 2] = global_ns();
    // Both words in one round trip to L2, before either is used.
    const unsigned long long verdict = __ldcg(a.verdict);
    const int stop = __ldcg(a.stop_request);
    if (verdict != kAllFinite) {
      if (clock_keeper) {
        a.clocks[step * 4 + 3] = global_ns();
        a.outcome->nonfinite = verdict;
      }
      break;
    }
    update_phase(a, s, own, smem, l, a.rules[step]);
    __syncthreads();  // the updated copies, before the next forward reads them
    if (clock_keeper) {
      a.clocks[step * 4 + 3] = global_ns();
      // For the host's watchdog (a posted write across PCIe: the step does not wait for it).
      if (a.host_progress != nullptr) *a.host_progress = step + 1;
    }
    if (stop != 0) {
      ++step;
      if (clock_keeper) a.outcome->stop_seen = 1;
      break;
    }
  }
  if (clock_keeper) a.outcome->steps_done = step;
  keep_exchange_epoch(a.peers, epoch);
  grid.sync();  // every block has read the words: leave them ready for the next launch
  if (clock_keeper) {
    *a.verdict = kAllFinite;
    *a.stop_request = 0;
  }
}

int resident_persistent_blocks(std::size_t shared_bytes) {
  CNN_CHECK_CUDA(cudaFuncSetAttribute(seed_persistent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(shared_bytes)));
  int blocks = 0;
  CNN_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, seed_persistent_kernel, kThreads, shared_bytes));
  return blocks;
}

Shape shape_of(const SeedModel& m, const SeedPersistentPlan& plan) {
  const TensorShape p = m.pooled();
  Shape s;
  s.n = plan.n;
  s.columns = plan.columns;
  s.filters = m.filters;
  s.cells = p.height * p.width;
  s.pooled_width = p.width;
  s.width = m.input.width;
  s.image = static_cast<std::int64_t>(m.input.height) * m.input.width;
  s.most_columns = plan.most_columns;
  s.forward_lanes = plan.forward_lanes;
  s.sweep_splits = plan.sweep_splits;
  s.cells_per_block = plan.cells_per_block;
  s.chunk = 0;
  return s;
}

int device_attribute(cudaDeviceAttr attribute) {
  int device = 0, value = 0;
  CNN_CHECK_CUDA(cudaGetDevice(&device));
  CNN_CHECK_CUDA(cudaDeviceGetAttribute(&value, attribute, device));
  return value;
}

}  // namespace

const char* seed_persistent_unsupported(const SeedModel& m, std::int64_t n) {
  if (m.input.channels != 1) return "the persistent kernel takes one input channel";
  if (n < 1 || n > kMaxBatch) return "the persistent kernel takes batches of 1 to 8192 samples per rank";
  if (device_attribute(cudaDevAttrCooperativeLaunch) == 0) return "this GPU cannot launch cooperative kernels";
  const SeedPersistentPlan plan = plan_seed_persistent(m, n);
  if (plan.chunk_too_small()) return "too many pool cells per block for the persistent kernel's staging (too few filters)";
  if (plan.shared_bytes > static_cast<std::size_t>(device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin)))
    return "the persistent kernel's shared memory does not fit this GPU";
  if (resident_persistent_blocks(plan.shared_bytes) < 1) return "the persistent kernel does not fit a multiprocessor";
  return "";
}

SeedPersistentPlan plan_seed_persistent(const SeedModel& m, std::int64_t n) {
  SeedPersistentPlan plan;
  plan.n = n;
  plan.blocks = multiprocessor_count();
  plan.threads = kThreads;
  plan.columns = m.fc_inputs();
  plan.most_columns = static_cast<int>(ceil_div(plan.columns, plan.blocks));
  for (int b = 0; b < plan.blocks; ++b)
    plan.cells_per_block = std::max(plan.cells_per_block, ownership(b, plan.blocks, plan.columns, m.filters).cells);
  // Threads per sample in the forward: as many as keep every thread busy on small batches.
  plan.forward_lanes = 1;
  while (plan.forward_lanes < 32 && n * plan.forward_lanes * 2 <= kThreads &&
         plan.forward_lanes * 2 <= plan.most_columns)
    plan.forward_lanes *= 2;
  plan.sweep_splits = static_cast<int>(std::clamp<std::int64_t>(kThreads / plan.most_columns, 1, std::min<std::int64_t>(n, 32)));
  // Samples per staged round of the backward: as many as the patch stage holds, in whole warps' worth.
  const std::size_t per_sample = static_cast<std::size_t>(plan.cells_per_block) * kPatchFloats * sizeof(float);
  plan.chunk = static_cast<int>(std::min<std::size_t>(kMaxChunk, kPatchStageBytes / per_sample) / 32 * 32);
  Shape s = shape_of(m, plan);
  s.chunk = std::max(plan.chunk, 32);
  plan.shared_bytes = static_cast<std::size_t>(shared_layout(s).total) * sizeof(float);
  plan.block_logit_floats = static_cast<std::int64_t>(plan.blocks) * n * kO;
  plan.conv_partial_floats = static_cast<std::int64_t>(plan.blocks) * m.filters * kConvValues;
  plan.exchange_floats = plan.columns * kO + m.filters * kConvValues + kO + 1;  // ExchangeLayout
  return plan;
}

void launch_seed_persistent(const SeedPersistentArgs& args, const SeedModel& m, const SeedPersistentPlan& plan,
                            cudaStream_t stream) {
  Shape s = shape_of(m, plan);
  s.chunk = plan.chunk;
  (void)resident_persistent_blocks(plan.shared_bytes);  // sets the kernel's shared memory limit
  SeedPersistentArgs a = args;
  void* params[] = {&a, &s};
  CNN_CHECK_CUDA(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(seed_persistent_kernel),
                                             dim3(static_cast<unsigned>(plan.blocks)), dim3(kThreads), params,
                                             plan.shared_bytes, stream));
}

}  // namespace cnn::cuda
