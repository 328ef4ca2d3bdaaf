// What both loss ops keep per batch (op_softmax_cross_entropy.cu, op_fc_softmax.cu): the batch's
// labels and the per-sample losses and hits. In a training step the labels are gathered on the side
// stream at the step's start (only the loss, at the end of the forward chain, reads them) and the
// batch's sums run on the side stream after the loss (the main chain never waits for them); an
// evaluation does both on the main stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_backend.hpp"
#include "cuda/device_buffer.hpp"

namespace cnn::cuda {

struct OpShared;

class LossLabels {
 public:
  explicit LossLabels(OpShared& shared);
  ~LossLabels();
  LossLabels(const LossLabels&) = delete;
  LossLabels& operator=(const LossLabels&) = delete;

  // Sized for a batch of n (the largest so far); true when a buffer moved.
  bool reserve(std::int64_t n);
  // A training step's start: the labels' gather on the side stream.
  void gather_at_step_start(const DeviceBatch& batch);
  // The batch's labels for the loss: a training step's main stream waits for the gather above; an
  // evaluation gathers them here, on the main stream.
  const std::uint8_t* labels_for(const DeviceBatch& batch);
  float* sample_loss() const { return sample_loss_.get(); }
  int* sample_correct() const { return sample_correct_.get(); }
  // After the per-sample loss: its sums added to the batch's loss and hit count.
  void add_batch_stats(const DeviceBatch& batch);

 private:
  OpShared& shared_;
  cudaEvent_t labels_ready_ = nullptr;  // the side stream's gather, awaited by the loss
  DeviceBuffer<std::uint8_t> labels_;   // [n]
  DeviceBuffer<float> sample_loss_;     // [n]
  DeviceBuffer<int> sample_correct_;    // [n]
};

}  // namespace cnn::cuda
