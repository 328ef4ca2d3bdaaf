// The `cuda` backend for any network the --model grammar allows (make_cuda_backend picks it when the
// network is not the seed model, which keeps its fused step in cuda_backend.hpp).
//
// Layer by layer, through the layer ops' planned forms (layer_ops.hpp): a ReLU right after a conv or
// fc is folded into that layer's store, and its backward into the mask on the input gradient written
// by the layer after it. As in the fused backend, the data set is resident on the GPU as uint8, the
// epoch's order is uploaded once per epoch, and a whole training step (index copy, gather, forward,
// loss, backward) is one CUDA graph per batch size, replayed with only the index copy's source
// changed. CNN_CUDA_GRAPHS=0 queues the same work kernel by kernel instead, for A/B timing.
//
// In the backward, each layer's weight gradient runs on a second stream, beside the input gradient
// on the main stream (they only share the read of the output gradient): at small batches the step is
// a chain of short kernels, and two chains halve its length. A layer with no input gradient (the
// first with parameters) keeps its weight gradient on the main stream, where nothing else is left to
// run, instead of queueing it behind the side stream's. The labels' gather and the batch's loss and
// hit sums, which the main chain never waits for, run there too. Both streams are in the captured
// graph and join before the step ends. Every sum still has its fixed order.
//
// A first layer conv3x3 (stride 1, no padding, 1 or 3 channels) + ReLU + maxpool2 runs as the seed
// model's fused op (layer_ops.hpp, ConvReluPoolPlan): the conv output and the pool's backward are
// never materialised. As the network's first op it reads the uint8 data set through the batch's
// indices, so there is no gathered float batch either, and its weight gradient reads the 4x4 input
// patches the forward saved. CNN_CUDA_FUSE_CONV_POOL=0 runs the pair layer by layer instead, for A/B.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/network.hpp"
#include "device_backend.hpp"
#include "device_buffer.hpp"
#include "device_dataset.hpp"
#include "layer_ops.hpp"
#include "step_graph.hpp"
#include "step_timer.hpp"

namespace cnn::cuda {

class CudaLayerBackend final : public DeviceBackend {
 public:
  CudaLayerBackend(const BackendOptions& options, const Network& network);
  ~CudaLayerBackend() override;
  CudaLayerBackend(const CudaLayerBackend&) = delete;
  CudaLayerBackend& operator=(const CudaLayerBackend&) = delete;

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
  void apply_update(const OptimizerSettings& settings, float grad_scale) override;
  BatchStats take_train_stats() override;
  BatchStats evaluate(std::int64_t first, std::int64_t count) override;
  void synchronize() override;
  PhaseTimes take_phase_times() override;

  cudaStream_t stream() const override { return stream_; }
  int device() const override { return device_; }

 protected:
  std::int64_t param_count() const override { return network_.layout.total(); }

 private:
  // One executed step of the network: a layer, with a following ReLU folded in.
  struct Op {
    LayerKind kind = LayerKind::kRelu;  // kConv, kFc, kMaxPool or kRelu (flatten is no op: NCHW is flat)
    const Layer* layer = nullptr;
    bool relu_after = false;            // conv/fc: its output went through a ReLU (folded in)
    bool output_is_relu = false;        // its output is a ReLU's output (folded, or a kRelu op)
    std::int64_t in_size = 0, out_size = 0;  // floats per sample
    bool needs_input_grad = false;      // some earlier op has parameters
    bool pool_fused = false;            // conv: runs with the max-pool after it as one op
    bool reads_data = false;            // fused and the first op: reads the uint8 data set itself
    bool fused_into_conv = false;       // maxpool: done by the conv before it
    SeedModel fused_model;              // conv with pool_fused: its shape as the seed op's
  };
  // Marks a first conv3x3 + ReLU + maxpool2 pair for the fused op, where the shapes allow it.
  void fuse_first_conv_pool();
  // Launch shapes for one batch size.
  struct Plans {
    std::vector<LayerPlans> ops;  // per op (conv/fc; empty plans for the others)
    ConvReluPoolPlan conv_relu_pool;  // for the op with pool_fused, if any
    std::int64_t workspace_floats = 0;
  };

  const Plans& plans_for(std::int64_t n);
  void ensure_batch_capacity(std::int64_t n);
  // images, indices: the batch, for a first op that reads the data set itself (reads_data).
  void enqueue_forward(std::int64_t n, const Plans& plans, const std::uint8_t* images, const std::int32_t* indices,
                       bool training);
  void enqueue_train_step(std::int64_t n, const std::int32_t* indices, bool timed);
  StepGraph& graph_for(std::int64_t n);
  void drop_graphs() noexcept;
  BatchStats read_stats(int slot);

  Network network_;
  std::vector<Op> ops_;
  OptimizerKind optimizer_;
  int device_ = 0;
  int multiprocessors_ = 0;
  bool use_graphs_ = true;
  std::string description_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t side_stream_ = nullptr;  // weight gradients, the labels' gather, the batch's stats
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  cudaEvent_t labels_ready_ = nullptr;  // the side stream's label gather, awaited by the softmax

  DeviceBuffer<float> params_, grads_, optimizer_state_;

  DeviceDataset data_;

  // Per batch, sized for the largest batch so far: activations[k] is op k's input (activations[0]
  // the gathered images), gradients[k] dL/d(activations[k]) (for ReLU outputs: the pre-ReLU one).
  std::int64_t capacity_ = 0;
  DeviceBuffer<std::int32_t> batch_indices_;
  DeviceBuffer<std::uint8_t> batch_labels_;
  DeviceBuffer<float> sample_loss_;  // per sample, summed into loss_sums_ on the side stream
  DeviceBuffer<int> sample_correct_;
  std::vector<DeviceBuffer<float>> activations_, gradients_;
  std::vector<DeviceBuffer<std::int32_t>> argmax_;  // per op (pool ops only)
  DeviceBuffer<std::uint8_t> pool_winners_;         // [n, F, PH, PW] of the fused conv + pool (a*2+b)
  DeviceBuffer<uint4> pool_patches_;                 // [n, C, PH*PW] 4x4 uint8 input patches (reads_data)
  DeviceBuffer<float> workspace_, side_workspace_;  // split-K partial sums, one per stream

  static constexpr int kTrainSlot = 0;
  static constexpr int kEvalSlot = 1;
  DeviceBuffer<double> loss_sums_;
  DeviceBuffer<std::int64_t> correct_counts_;
  PinnedBuffer<double> loss_readback_;
  PinnedBuffer<std::int64_t> correct_readback_;
  std::int64_t train_samples_ = 0;

  std::map<std::int64_t, Plans> plans_;       // by batch size
  std::map<std::int64_t, StepGraph> graphs_;  // by batch size
  std::unique_ptr<StepTimer> timer_;
};

}  // namespace cnn::cuda
