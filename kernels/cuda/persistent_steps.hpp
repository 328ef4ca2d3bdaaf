// The cuda backend's persistent path for the seed model (Backend::train_chunk, step_chunk.hpp): the
// scratch, per-step update rules, clocks and control words of the persistent seed kernel
// (ops/seed_persistent.hpp), and the host word it polls for a stop. One per backend; it launches one
// kernel per chunk on the backend's stream and waits for it (the trainer needs to know how far it got).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "cnn/model.hpp"
#include "cnn/step_chunk.hpp"
#include "cuda/device_buffer.hpp"
#include "dist/peer_area.hpp"
#include "ops/seed_persistent.hpp"

namespace cnn::cuda {

// What a chunk reads and writes besides the kernel's own scratch: the backend's buffers.
struct PersistentTargets {
  float* params = nullptr;
  float* grads = nullptr;
  float* optimizer_state = nullptr;
  SeedParamOffsets at;
  const std::uint8_t* images = nullptr;  // the resident training set
  const std::uint8_t* labels = nullptr;
  const std::int32_t* order = nullptr;   // this epoch's order
  std::int64_t order_size = 0;
  double* loss_sum = nullptr;            // the training stats' device slot
  std::int64_t* correct = nullptr;
  float label_smoothing = 0.0f;
  OptimizerKind optimizer = OptimizerKind::kSgd;  // what the optimizer state was made for
};

class PersistentSeedSteps {
 public:
  explicit PersistentSeedSteps(const SeedModel& model);
  ~PersistentSeedSteps();
  PersistentSeedSteps(const PersistentSeedSteps&) = delete;
  PersistentSeedSteps& operator=(const PersistentSeedSteps&) = delete;

  // "" when chunks of `batch`-sample steps run in the persistent kernel on this GPU, else why not.
  std::string unsupported(std::int64_t batch) const;
  // 2+ ranks: maps every rank's peer area for the in-kernel exchange, and says "" when every chunk
  // from now on sums each step's gradient over `world` inside the kernel, else why not (no peer
  // access, several nodes, GPUs with different multiprocessor counts). Collective.
  std::string prepare_exchange(const MpiWorld& world, int device);
  // Runs the chunk on `stream` and waits for it, calling chunk.on_progress as its steps finish.
  StepChunkResult run(const StepChunk& chunk, const PersistentTargets& targets, cudaStream_t stream);
  // The host word the kernel polls once per step (mapped into the GPU's address space).
  volatile int* stop_word() const { return stop_word_; }

 private:
  const SeedPersistentPlan& plan_for(std::int64_t n);
  void wait_reporting_progress(const StepChunk& chunk, cudaStream_t stream);

  SeedModel model_;
  std::map<std::int64_t, SeedPersistentPlan> plans_;  // by batch size
  DeviceBuffer<float> block_logits_, grad_logits_, sample_loss_, conv_partial_;
  DeviceBuffer<int> sample_correct_;
  DeviceBuffer<StepRule> rules_;
  DeviceBuffer<unsigned long long> clocks_;
  DeviceBuffer<unsigned long long> verdict_;
  DeviceBuffer<int> stop_request_;
  DeviceBuffer<SeedPersistentOutcome> outcome_;
  PinnedBuffer<StepRule> rules_staging_;
  PinnedBuffer<unsigned long long> clocks_readback_;
  PinnedBuffer<SeedPersistentOutcome> outcome_readback_;
  std::unique_ptr<PeerArea> peers_;            // 2+ ranks, after prepare_exchange; null: one rank
  // Two words of cudaHostAllocMapped memory: the stop word the kernel reads, and the count of steps
  // it has finished in the running launch, which the waiting host thread reads.
  volatile int* stop_word_ = nullptr;
  volatile int* progress_word_ = nullptr;
  const volatile int* stop_word_device_ = nullptr;  // the same words as the GPU addresses them
  volatile int* progress_word_device_ = nullptr;
  cudaEvent_t chunk_done_ = nullptr;  // recorded after each launch's readbacks
};

}  // namespace cnn::cuda
