// What a backend on one GPU needs besides the network's own work (cuda_backend.hpp runs the ops;
// this class knows none of them): the GPU and the stream every operation is ordered on (device_queue(),
// for the device communicators), the flat buffers (parameters, gradients, optimizer state) and their
// host copies, the network's state (bn's running statistics) and the exchange of bn's global
// statistics (statistics_exchange.hpp), the data set and the epoch's order resident on the device, the batch's index buffer,
// the device-side loss and hit sums, the update, the divergence check (nonfinite.cuh), the phase timer
// (step_timer.hpp), and the graph caches that hold the eager -> capture -> replay policy of the plain
// and the overlapped training step (step_graph.hpp).
//
// A derived backend says how to size its buffers for a batch, how to queue one training step (after
// the index copy, which this class queues) and one evaluation chunk, and which ranges of the gradient
// buffer its backward finishes in which order (gradient_ready_points).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/network.hpp"
#include "cuda/device_buffer.hpp"
#include "data/device_dataset.hpp"
#include "dist/statistics_exchange.hpp"
#include "ops/nonfinite.cuh"
#include "cuda/step_graph.hpp"
#include "cuda/step_timer.hpp"

namespace cnn::cuda {

// One batch as a training step or an evaluation chunk sees it: device pointers, valid while its work
// is queued.
struct DeviceBatch {
  std::int64_t n = 0;
  bool training = false;
  const std::uint8_t* images = nullptr;   // the split's samples, [N, C, H, W] uint8
  const std::uint8_t* labels = nullptr;   // the split's labels, [N]
  const std::int32_t* indices = nullptr;  // [n]: the batch's samples (training: the index copy's destination)
  double* loss_sum = nullptr;             // [1]: the batch's loss sum is added here
  std::int64_t* correct = nullptr;        // [1]: and its correct count here
  float* logits = nullptr;                // evaluation, when set: [n, classes], the loss op copies the logits here
  float label_smoothing = 0.0f;           // of the loss: --label-smoothing in a training step, 0 in evaluation
  const MaskOrigin* mask_origin = nullptr; // training: [1], the step's (dropout_mask.hpp); null in evaluation
  Augment augment;                         // training: --augment, applied by the gather; none in evaluation
};

class DeviceBackend : public Backend {
 public:
  ~DeviceBackend() override;
  DeviceBackend(const DeviceBackend&) = delete;
  DeviceBackend& operator=(const DeviceBackend&) = delete;

  std::string name() const override { return "cuda"; }
  std::string device_description() const override;
  MemorySpace memory_space() const override { return MemorySpace::kDevice; }
  const DeviceQueue* device_queue() const override { return &queue_; }

  void bind_data(const Dataset& train, const Dataset& test) override;
  void upload_params(const std::vector<float>& host) override;
  std::vector<float> download_params() override;
  void upload_optimizer_state(const std::vector<float>& host) override;
  std::vector<float> download_optimizer_state() override;
  // The network's state (Network::state_count floats, bn's running statistics), in device memory
  // at a fixed address (OpShared::state); both wait for the stream.
  void upload_state(const std::vector<float>& host) override;
  std::vector<float> download_state() override;
  // bn's global statistics (statistics_exchange.hpp): every graph is dropped (what a step queues
  // changes), and when the communicator cannot queue the sums on the stream, training steps run
  // eagerly from here on.
  void set_statistics_communicator(Communicator* ranks) override;
  std::string statistics_exchange() const override;
  // The asynchronous checkpoint's snapshot: one device-to-host copy each of the parameters, the
  // optimizer state and the network's state, on the stream after the queued steps, into pinned
  // memory (allocate_host_floats).
  FlatSizes flat_sizes() const override { return {total_, optimizer_state_.size(), state_.size()}; }
  void download_all(float* out) override;
  std::unique_ptr<HostFloats> allocate_host_floats(std::int64_t count) const override;
  float* params() override { return params_.get(); }
  float* grads() override { return grads_.get(); }
  void begin_epoch(const std::vector<std::int32_t>& permutation) override;
  void compute_gradients(std::int64_t first, std::int64_t count) override;
  // With a stream-ordered listener (NCCL, peer memory) the whole step, communication included, is one
  // CUDA graph per batch size and listener generation (unless bn's statistics go through the host:
  // set_statistics_communicator); the first step of each epoch runs eagerly, so
  // that the communicator's events time it (overlap fraction). Otherwise (a host-side reduction, which
  // cannot run under device work without blocking the host, or an empty slice): the plain step, then
  // the listener is told once.
  void compute_gradients_overlapped(std::int64_t first, std::int64_t count, GradientReadyListener& listener) override;
  void apply_update(const OptimizerSettings& settings, float grad_scale) override;
  BatchStats take_train_stats() override;
  BatchStats evaluate(std::int64_t first, std::int64_t count) override;
  BatchStats evaluate_logits(std::int64_t first, std::int64_t count, float* logits) override;
  void synchronize() override;
  // Data (the index copy and the gathers), forward, backward, update; nothing for h2d, as no step
  // copies from the host. See StepTimer.
  PhaseTimes take_phase_times() override;

  // The divergence check on grads() (Backend's contract); the deferred one's word gates the update.
  std::int64_t first_nonfinite_grad() override;
  bool enqueue_nonfinite_check() override;
  std::int64_t enqueued_nonfinite_result() override;
  void set_grad_for_test(std::int64_t index, float value) override;

  cudaStream_t stream() const { return stream_; }

 protected:
  // Picks GPU options.local_rank % visible devices and makes the stream, the flat buffers (zeroed)
  // and the stats slots for `network`'s parameters. `details`: the description's word on the derived
  // backend's work ("ops ...").
  DeviceBackend(const BackendOptions& options, const Network& network, const std::string& details);

  // Plans and buffers for a batch of n samples, training or evaluation; true when a buffer that a
  // captured step may hold moved (every graph is then dropped).
  virtual bool prepare_batch(std::int64_t n) = 0;
  // Queues the rest of a training step after its index copy: data, forward, backward, closing the
  // timer's phases when `timed`. With a listener (the overlapped step; stream-ordered), tells it
  // about the gradients as compute_gradients_overlapped says and ends with all_gradients_ready().
  virtual void enqueue_step(const DeviceBatch& batch, bool timed, GradientReadyListener* listener) = 0;
  // Queues the forward and the loss of one evaluation chunk; adds to batch.loss_sum and batch.correct.
  virtual void enqueue_evaluation(const DeviceBatch& batch) = 0;

  const DeviceDataset& data() const { return data_; }
  StepTimer& timer() { return *timer_; }
  float* mutable_params() const { return params_.get(); }
  float* mutable_grads() const { return grads_.get(); }
  float* mutable_state() const { return state_.get(); }
  float* mutable_optimizer_state() const { return optimizer_state_.get(); }
  OptimizerKind optimizer_kind() const { return optimizer_; }
  float label_smoothing() const { return label_smoothing_; }
  const Augment& augment() const { return augment_; }
  StatisticsExchange* statistics() const { return statistics_.get(); }
  // The training stats' device slot (what take_train_stats reads), for steps a derived backend runs
  // outside compute_gradients; count_train_samples adds the samples those steps took.
  double* train_loss_sum() const { return loss_sums_.get() + kTrainSlot; }
  std::int64_t* train_correct() const { return correct_counts_.get() + kTrainSlot; }
  void count_train_samples(std::int64_t samples) { train_samples_ += samples; }

 private:
  void check_train_range(std::int64_t first, std::int64_t count) const;
  void ensure_batch_capacity(std::int64_t n);
  // The training step of n samples whose index copy reads `indices`.
  void enqueue_train_step(std::int64_t n, const std::int32_t* indices, bool timed, GradientReadyListener* listener);
  void drop_graphs() noexcept;
  // Training steps may be captured: CUDA graphs are on (BackendOptions::cuda_graphs) and bn's
  // statistics, if exchanged, go through a communicator that queues on the stream.
  bool graphs_enabled() const { return graphs_option_ && statistics_->capturable(); }
  BatchStats read_stats(int slot);

  std::int64_t total_;
  std::int64_t sample_size_;  // C*H*W of the network's input
  std::int64_t classes_;      // logits per sample
  std::string model_text_;    // the network, for data errors
  OptimizerKind optimizer_;
  float label_smoothing_;  // of the training loss, a constant of the captured steps
  Augment augment_;        // of the training batches' gather (--augment), a constant of the captured steps
  int device_ = 0;
  std::string description_;  // without the word on CUDA graphs, which may change (graphs_enabled())
  bool graphs_option_;       // BackendOptions::cuda_graphs
  cudaStream_t stream_ = nullptr;
  DeviceQueue queue_;

  // Flat buffers, one layout (ParamLayout).
  DeviceBuffer<float> params_, grads_, optimizer_state_;
  DeviceBuffer<float> state_;  // Network::state_count floats: bn's running statistics
  std::unique_ptr<StatisticsExchange> statistics_;

  // The data, resident as uint8, and the orders that index it.
  DeviceDataset data_;
  // The training step's copy of its slice of the epoch's order (the graphs' index copy writes it).
  DeviceBuffer<std::int32_t> batch_indices_;
  // Where this step's samples stand, for dropout's masks and --augment's draws; written before each
  // step only when the network has a dropout layer or the batches are augmented (draws_masks_).
  DeviceBuffer<MaskOrigin> mask_origin_;
  bool draws_masks_ = false;
  std::int64_t capacity_ = 0;  // the largest batch prepared so far

  // Device-side sums, read only when asked: [0] train, [1] evaluation.
  static constexpr int kTrainSlot = 0;
  static constexpr int kEvalSlot = 1;
  DeviceBuffer<double> loss_sums_;
  DeviceBuffer<std::int64_t> correct_counts_;
  PinnedBuffer<double> loss_readback_;
  PinnedBuffer<std::int64_t> correct_readback_;
  DeviceBuffer<float> eval_logits_;  // evaluate_logits: one chunk's logits, copied to the host after it
  std::int64_t train_samples_ = 0;

  std::unique_ptr<StepTimer> timer_;
  std::unique_ptr<DeferredNonFiniteCheck> nonfinite_check_;
  StepGraphCache graphs_;             // the plain step
  StepGraphCache overlapped_graphs_;  // the overlapped step, for the listener's generation
  bool eager_overlapped_step_ = true;  // the next overlapped step runs eagerly (set by begin_epoch)
};

}  // namespace cnn::cuda
