// Many training steps of the seed CNN (one input channel) inside ONE kernel launch: the persistent
// seed kernel. Each step runs forward, loss, backward, the divergence check and the update, with a
// grid-wide barrier between the phases, so that a step costs no kernel launch and no launch gap.
//
// Work is split by OWNERSHIP, not by phase: block b owns a fixed, contiguous range of the fc layer's
// input columns (pool cell, filter), taken in cell-major order, so a block touches few pool cells
// and every filter. For its columns, and for every sample of every step, block b alone computes the
// conv + ReLU + pool values, their part of each sample's logits, the fc weight gradient and the
// conv gradient's share, and it updates its columns' fc weights, which it keeps in shared memory for
// the whole launch. The conv weights (a few kB) are in every block's shared memory, and every block
// applies the same update to its copy. Nothing per sample and column is ever stored: the backward
// recomputes the conv outputs from the input patches (36 FMAs) instead of writing and reading the
// pooled values and the pool winners (5 bytes per sample and column would not fit L2 at batch 1000).
//
// A step (n samples, G blocks):
//   A. forward: each block, its columns, all samples: partial logits [G, n, 10]      | grid barrier
//   B. loss: a warp per sample sums the G partials (block order), softmax CE -> dL/dlogits | barrier
//   C. backward: each block, its columns: fc weight gradient (final: the block has every sample),
//      its share of each filter's conv gradient [G, F, 10], the non-finite check of its columns | barrier
//   D. a warp per conv gradient value sums the G shares; a warp per fc bias (block b: its share of
//      these values); the batch's loss and hits; block 0 publishes the host's stop word, read at the
//      step's start (one rank)
//   X. 2+ ranks only, right after D in each block: the gradient summed over the ranks inside the
//      kernel, through peer memory, with the stop word (seed_persistent_exchange.cuh); block 0
//      publishes the ranks' stop                                                        | barrier
//   E. update: each block its columns' fc weights (in shared memory and in the flat buffer), and
//      its copies of the conv weights and fc bias; block 0 also writes those to the flat buffer.
//      None if any gradient of the step was not finite: the kernel ends before the update.
// Every sum runs in an order fixed by (model, n, the GPU's multiprocessor count, the ranks): the same
// bits on every run, and at any chunk boundary (a step does not know which launch it is in).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cnn/model.hpp"
#include "dist/peer_area.hpp"
#include "ops/optimizer_rules.cuh"

namespace cnn::cuda {

// Launch shape and scratch sizes for steps of n samples; fixed by (model, n, GPU model).
struct SeedPersistentPlan {
  std::int64_t n = 0;
  int blocks = 0;           // G: one per multiprocessor (all resident: a cooperative launch)
  int threads = 0;          // per block
  std::int64_t columns = 0; // fc inputs F * P
  int most_columns = 0;     // the most any block owns
  int cells_per_block = 0;  // the most pool cells any block's columns touch
  int forward_lanes = 0;    // threads per sample in the forward (a power of two, <= 32)
  int sweep_splits = 0;     // threads per column in the backward, each summing an interleaved share of the samples
  int chunk = 0;            // samples per staged round of the backward (a multiple of 32)
  std::size_t shared_bytes = 0;
  std::int64_t block_logit_floats = 0;    // [G, n, 10]
  std::int64_t conv_partial_floats = 0;   // [G, F, 10]
  std::int64_t exchange_floats = 0;       // per inbox of the in-kernel exchange (2+ ranks): the gradient and the stop word
  bool chunk_too_small() const { return chunk < 32; }
};

// Why the persistent kernel cannot run this model at batch n on this GPU, or "" when it can.
const char* seed_persistent_unsupported(const SeedModel& m, std::int64_t n);
SeedPersistentPlan plan_seed_persistent(const SeedModel& m, std::int64_t n);

// Where the parameters sit in the flat buffers (ParamLayout offsets of the two layers).
struct SeedParamOffsets {
  std::int64_t conv_weight = 0, conv_bias = 0, fc_weight = 0, fc_bias = 0, total = 0;
};

// Per step of a chunk: the update rule with that step's lr and Adam constants.
using StepRule = UpdateRule;

// What the kernel reports back (device memory, read after the launch).
struct SeedPersistentOutcome {
  int steps_done = 0;                      // updates applied
  int stop_seen = 0;                       // the host's stop word was set at step steps_done - 1
  unsigned long long nonfinite = ~0ULL;    // the refused step's first non-finite index, or ~0 (none)
};

struct SeedPersistentArgs {
  // The flat buffers: parameters, gradients (each step's are written there), optimizer state
  // (momentum: one copy; adam: m then v), by ParamLayout.
  float* params = nullptr;
  float* grads = nullptr;
  float* state = nullptr;
  SeedParamOffsets at;
  // The data: the resident uint8 training images and labels, and the epoch's order from this rank's
  // first sample of the chunk on: step k takes order[k*order_stride .. k*order_stride + n).
  const std::uint8_t* images = nullptr;
  const std::uint8_t* labels = nullptr;
  const std::int32_t* order = nullptr;
  std::int64_t order_stride = 0;  // the global batch (n with one rank)
  // 2+ ranks: every rank's peer area, for the in-kernel exchange; ranks <= 1: no exchange.
  PeerView peers{};
  int steps = 0;
  const StepRule* rules = nullptr;  // [steps], device memory
  float label_smoothing = 0.0f;
  int nan_at = -1;  // test hook: this step's last gradient element is made NaN before the check
  // Scratch (plan sizes) and results.
  float* block_logits = nullptr;   // [G, n, 10]
  float* grad_logits = nullptr;    // [n, 10]
  float* sample_loss = nullptr;    // [n]
  int* sample_correct = nullptr;   // [n]
  float* conv_partial = nullptr;   // [G, F, 10]
  unsigned long long* verdict = nullptr;  // [1], the step's first non-finite index; kAllFinite between steps
  int* stop_request = nullptr;     // [1], 0 at launch
  const volatile int* host_stop = nullptr;  // the host's stop word, mapped (may be null)
  volatile int* host_progress = nullptr;    // mapped: the steps finished in this launch (may be null)
  SeedPersistentOutcome* outcome = nullptr;
  unsigned long long* clocks = nullptr;  // [steps, 4]: block 0's %globaltimer at the step's start,
                                         // after the loss, after the check, after its update (ns)
  double* loss_sum = nullptr;            // [1], each step's loss sum is added
  std::int64_t* correct = nullptr;       // [1], and its correct count
};

// Launches the chunk (cooperative: every block resident) on `stream`. verdict must hold kAllFinite
// and stop_request 0; the kernel leaves them so.
void launch_seed_persistent(const SeedPersistentArgs& args, const SeedModel& m, const SeedPersistentPlan& plan,
                            cudaStream_t stream);

}  // namespace cnn::cuda
