// The `cuda` backend: the network as the list of ops that plan_ops picks for the GPU
// (include/cnn/op_plan.hpp), each op a DeviceOp (device_op.hpp). The seed model is one fused op
// (conv_relu_pool_fc_softmax: seed_step.hpp); any other network runs layer by layer, a ReLU folded
// into the conv or fc before it, and a first conv3x3 + ReLU + maxpool2 as the fused conv_relu_pool.
//
// The model's flat buffers, the data set (uint8) and the epoch's order all live on one GPU, so a
// training step moves nothing across PCIe; each step (index copy, gathers, forward, loss, backward)
// is one CUDA graph per batch size, replayed with only the index copy's source changed
// (DeviceBackend, device_backend.hpp, holds all of that). Every sum runs in a fixed order, so a run
// on the same GPU repeats bit for bit.
//
// Streams: the ops queue on the backend's stream, and a layer network also on a side stream, at the
// highest priority: its weight gradients (beside the input gradients), its labels' gather and its
// batch's loss and hit sums, which the main chain never waits for. The side stream carries the
// weight gradients, which nothing on the main stream waits for until the step's end, so the main
// stream tends to run ahead and take the SMs; at batch 128 and 512 the side stream's chain then
// finished last. At the highest priority its blocks are scheduled first whenever both streams have
// work (nvidia-h100-x1, cifar preset: 121 -> 117 ms/epoch at batch 128, 93 -> 86 at 512;
// docs/PERFORMANCE.md). Both streams are in the captured graph and join before the step ends.
//
// The overlapped step (compute_gradients_overlapped): every op with parameters is a ready point, in
// the order the backward finishes them (gradient_ready_points). With a listener that reduces early,
// each point but the last is reported where its gradients are final on the main stream (a weight
// gradient on the side stream makes the main stream wait for it), and the seed op computes its fc
// layer's gradients first; otherwise the backward keeps its fastest order. Either way the
// communication is in the step's CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/network.hpp"
#include "cnn/op_plan.hpp"
#include "cuda/device_backend.hpp"
#include "cuda/device_buffer.hpp"
#include "cuda/device_op.hpp"
#include "cuda/persistent_steps.hpp"
#include "cuda/timing_event_pair.hpp"

namespace cnn::cuda {

class CudaBackend final : public DeviceBackend {
 public:
  // ops: plan_ops(network, FusionTarget::kCuda), or another list of ops for the same network (tests
  // compare one with another); UsageError for a network or an op the kernels do not support.
  CudaBackend(const BackendOptions& options, const Network& network, const std::vector<Op>& ops);
  ~CudaBackend() override;

  // The ranges of each op with parameters, in the order the backward finishes them, with the compute
  // after each as measured by the last timed step that reported it (0 when not measured).
  std::vector<GradientReadyPoint> gradient_ready_points() override;
  std::vector<std::string> implementation_lines(std::int64_t n) const override;

  // The seed model's steps inside one persistent kernel (persistent_steps.hpp) where it can run
  // them; otherwise the default, one step per launch.
  std::string persistent_steps_unsupported(std::int64_t batch) const override;
  // 2+ ranks: the persistent kernel's in-kernel exchange through peer memory (persistent_steps.hpp).
  std::string prepare_chunk_exchange(const MpiWorld& world) override;
  StepChunkResult train_chunk(const StepChunk& chunk) override;
  volatile int* chunk_stop_word() override;

 protected:
  bool prepare_batch(std::int64_t n) override;
  void enqueue_step(const DeviceBatch& batch, bool timed, GradientReadyListener* listener) override;
  void enqueue_evaluation(const DeviceBatch& batch) override;

 private:
  void enqueue_gather(const DeviceBatch& batch);
  void enqueue_forward(const DeviceBatch& batch);
  OpTensors tensors(std::size_t k, std::int64_t n) const;
  // The staged tensors that a neighbour fills for a staged conv (OpTensors): op k-1's output gradient,
  // which op k writes; op k's input, which op k-1 writes. words null: none.
  StagedTensor staged_grad_handover(std::size_t k, std::int64_t n) const;
  StagedTensor staged_input_handover(std::size_t k, std::int64_t n) const;
  // The max-pool op k+1 that op k runs in its store (OpTensors::pooled): the pool's output, argmax
  // and staged output. out null: none.
  PooledOutput pool_handover(std::size_t k, std::int64_t n) const;
  // Op k's input gradient left in its split partials, which op k-1 adds (OpTensors::grad_out_partials).
  // sums null: none.
  SplitPartials split_grad_handover(std::size_t k, std::int64_t n) const;

  Network network_;  // the ops hold references to its layers
  OpShared shared_;
  std::vector<std::unique_ptr<DeviceOp>> ops_;
  std::vector<std::string> op_names_;  // Op::name() of each
  // activations_[k] is op k's input (activations_[0] the gathered images, unless the first op reads
  // the data set itself), gradients_[k] dL/d(activations_[k]) (for a ReLU's output, taken before it).
  std::vector<DeviceBuffer<float>> activations_, gradients_;
  std::vector<GradientReadyPoint> ready_points_;                  // in finishing order
  std::unique_ptr<PersistentSeedSteps> persistent_;  // the seed model's persistent path; null for other networks
  SeedParamOffsets seed_offsets_;                    // where its parameters sit (with persistent_)
  std::vector<std::unique_ptr<TimingEventPair>> after_ready_;  // per ready point: the compute after it
};

}  // namespace cnn::cuda
