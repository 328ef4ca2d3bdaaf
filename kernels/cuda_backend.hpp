// The `cuda` backend: the model's flat buffers, the data set (uint8) and the epoch's order all live
// on one GPU, so a training step moves nothing across PCIe. Each step's work (index copy, gather,
// forward, loss, backward) is one CUDA graph per batch size, replayed with only the index copy's
// source changed; CNN_CUDA_GRAPHS=0 queues the same work kernel by kernel instead, for A/B timing.
// CNN_CUDA_FUSED_FORWARD=0 selects the unfused forward of seed_step.hpp, also for A/B timing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cnn/backend.hpp"
#include "device_backend.hpp"
#include "device_buffer.hpp"
#include "device_dataset.hpp"
#include "seed_step.hpp"
#include "step_graph.hpp"
#include "step_timer.hpp"
#include "timing_event_pair.hpp"

namespace cnn::cuda {

class CudaBackend final : public DeviceBackend {
 public:
  CudaBackend(const BackendOptions& options, const SeedModel& model);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  std::string device_description() const override { return description_; }
  MemorySpace memory_space() const override { return MemorySpace::kDevice; }

  void bind_data(const Dataset& train, const Dataset& test) override;
  void upload_params(const std::vector<float>& host) override;
  std::vector<float> download_params() override;
  void upload_optimizer_state(const std::vector<float>& host) override;
  std::vector<float> download_optimizer_state() override;
  float* params() override { return params_.get(); }
  float* grads() override { return grads_.get(); }
  void begin_epoch(const std::vector<std::int32_t>& permutation) override;
  void compute_gradients(std::int64_t first, std::int64_t count) override;
  // The overlapped step (cuda_backend_overlap.cu): fc-first when the listener reduces early, the
  // listener told when the fc gradients are final and at the end; with a stream-ordered listener
  // (NCCL) the whole step, communication included, is one CUDA graph per batch size. The first step
  // of each epoch runs eagerly, so that the communicator's events can time it (overlap fraction).
  void compute_gradients_overlapped(std::int64_t first, std::int64_t count, GradientReadyListener& listener) override;
  std::vector<GradientReadyPoint> gradient_ready_points() override;
  void apply_update(const OptimizerSettings& settings, float grad_scale) override;
  BatchStats take_train_stats() override;
  BatchStats evaluate(std::int64_t first, std::int64_t count) override;
  void synchronize() override;
  // Data (the index copy; the fused forward reads the data set itself), forward, backward, update;
  // nothing for h2d, as no step copies from the host. See StepTimer.
  PhaseTimes take_phase_times() override;

  // For the device communicators: every operation of this backend is ordered on this stream, so a
  // collective queued on it needs no extra synchronisation with the step before or after it.
  cudaStream_t stream() const override { return stream_; }
  int device() const override { return device_; }
  bool uses_graphs() const { return use_graphs_; }

 protected:
  std::int64_t param_count() const override { return layout_.total(); }

 private:

  void ensure_batch_capacity(std::int64_t n);
  // Queues one step on the stream. `timed`: close a StepTimer phase after each stage (eager steps);
  // false while capturing a graph, whose replays are timed as one interval.
  void enqueue_train_step(const SeedStepPlan& plan, const std::int32_t* indices, bool timed);
  void enqueue_data_and_forward(const SeedStepPlan& plan, const std::int32_t* indices, bool timed);
  StepGraph& graph_for(std::int64_t n);
  void drop_graphs() noexcept;
  SeedStepTensors step_tensors() const;
  BatchStats read_stats(int slot);

  SeedModel model_;
  ParamLayout layout_;
  OptimizerKind optimizer_;
  int device_ = 0;
  bool use_graphs_ = true;
  bool fused_forward_ = true;  // CNN_CUDA_FUSED_FORWARD=0: the unfused forward, for A/B
  std::string description_;
  cudaStream_t stream_ = nullptr;

  // Flat buffers, one layout (see ParamLayout).
  DeviceBuffer<float> params_, grads_, optimizer_state_;
  const float* conv_weight_ = nullptr;  // views into params_ and grads_
  const float* conv_bias_ = nullptr;
  const float* fc_weight_ = nullptr;
  const float* fc_bias_ = nullptr;
  float* grad_conv_weight_ = nullptr;
  float* grad_conv_bias_ = nullptr;
  float* grad_fc_weight_ = nullptr;
  float* grad_fc_bias_ = nullptr;

  // The data, resident as uint8, and the orders that index it.
  DeviceDataset data_;

  // Per-batch activations and scratch, sized for the largest batch so far.
  std::int64_t capacity_ = 0;
  DeviceBuffer<std::int32_t> batch_indices_;
  DeviceBuffer<float> input_, pooled_, logits_, grad_logits_, sample_loss_, fc_partial_, sweep_partial_;
  DeviceBuffer<std::uint8_t> batch_labels_, argmax_;
  DeviceBuffer<int> sample_correct_;
  DeviceBuffer<uint4> patches_;  // the fused forward's saved input patches

  // Device-side sums, read only when asked: [0] train, [1] evaluation.
  static constexpr int kTrainSlot = 0;
  static constexpr int kEvalSlot = 1;
  DeviceBuffer<double> loss_sums_;
  DeviceBuffer<std::int64_t> correct_counts_;
  PinnedBuffer<double> loss_readback_;
  PinnedBuffer<std::int64_t> correct_readback_;
  std::int64_t train_samples_ = 0;

  std::map<std::int64_t, StepGraph> graphs_;  // by batch size
  // The overlapped step (cuda_backend_overlap.cu).
  void enqueue_overlapped_step(const SeedStepPlan& plan, const std::int32_t* indices, bool timed,
                               GradientReadyListener& listener);
  StepGraph& overlapped_graph_for(std::int64_t n, GradientReadyListener& listener);
  void drop_overlapped_graphs() noexcept;
  std::map<std::int64_t, StepGraph> overlapped_graphs_;  // by batch size, for listener generation below
  std::uint64_t overlapped_generation_ = 0;
  bool eager_overlapped_step_ = true;  // the next overlapped step runs eagerly (set by begin_epoch)
  TimingEventPair after_fc_ready_;     // the conv layer's backward of the last eager fc-first step
  std::unique_ptr<StepTimer> timer_;
};

}  // namespace cnn::cuda
