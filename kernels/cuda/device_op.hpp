// One op of the network's plan (include/cnn/op_plan.hpp) as the cuda backend runs it: a layer, a
// layer with its ReLU folded in, or a fused op. A layer's op is in the layer's file,
// kernels/layers/<name>.cu (the twin of src/layers/<name>.cpp), as make_<name>_op, which the table
// make_device_op (device_op.cu) finds through layers.def; a fused op is kernels/cuda/op_<name>.cu with
// its line in that table.
//
// The backend (cuda_backend.hpp) owns the activations between the ops: op k reads activations[k] and
// writes activations[k+1] (out_size floats per sample), and its backward reads gradients[k+1] and
// writes gradients[k] (when some earlier op has parameters). For an output that went through a ReLU,
// gradients[k+1] is taken before that ReLU: whoever writes it masks with the ReLU's output (the
// ReLU's backward folded in). An op owns whatever else it needs (argmax, saved patches, labels).
//
// Streams: everything runs on the main stream, except what the main chain does not wait for, which
// runs on the side stream (OpShared::weight_grad_place: weight gradients; the labels' gather; the
// batch's loss and hit sums). Both streams are in the captured step and join before it ends.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cnn/gradient_ready.hpp"
#include "cnn/network.hpp"
#include "cnn/op_plan.hpp"
#include "cuda/device_backend.hpp"
#include "cuda/device_buffer.hpp"
#include "cuda/timing_event_pair.hpp"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {

// What the ops of one backend share: the streams, the split-K workspaces, the flat buffers.
struct OpShared {
  OpShared() = default;
  ~OpShared();
  OpShared(const OpShared&) = delete;
  OpShared& operator=(const OpShared&) = delete;

  cudaStream_t stream = nullptr;       // the main stream (the backend's)
  cudaStream_t side_stream = nullptr;  // null when no op of the plan uses one
  cudaEvent_t fork_event = nullptr;
  cudaEvent_t join_event = nullptr;
  DeviceBuffer<float> workspace;       // split-K partial sums, one per stream, sized for the largest plan
  DeviceBuffer<float> side_workspace;
  float* params = nullptr;             // the flat buffers (they never move)
  float* grads = nullptr;
  float* state = nullptr;              // the network's state (Network::state_count floats: bn's running statistics)
  StatisticsExchange* statistics = nullptr;  // bn's global statistics: the sums over the ranks (may exchange nothing)
  int multiprocessors = 0;
  Precision precision = Precision::kFp32;  // of the conv and fc products (--precision)
  bool wgmma = false;                      // tf32 and bf16 on a GPU that runs the warpgroup product

  // Makes the side stream, at the highest priority (cuda_backend.hpp), and its two events.
  void make_side_stream();
  // The side stream waits for the main stream's work so far.
  void fork() const;
  // The main stream waits for the side stream's work so far.
  void join() const;

  struct Place {
    cudaStream_t stream;
    float* workspace;
  };
  // Where a layer's weight gradient runs: beside its input gradient, on the side stream (forked
  // here), since they only share the read of the output gradient; at small batches the step is a
  // chain of short kernels, and two chains halve its length. A layer with no input gradient (the
  // first with parameters) keeps it on the main stream: nothing else is left to run there, and on the
  // side stream it would wait for the later layers' weight gradients.
  Place weight_grad_place(bool has_input_grad);
};

// Op k's tensors in one step or evaluation chunk (device pointers; null where absent).
struct OpTensors {
  const float* in = nullptr;       // activations[k]; null for a first op that reads the data set
  float* out = nullptr;            // activations[k+1]
  float* grad_in = nullptr;        // gradients[k], when the op must pass a gradient back
  const float* grad_out = nullptr; // gradients[k+1]
  bool input_is_relu = false;      // `in` is a ReLU's output: mask grad_in with it
  // The op before is a staged conv that takes its output gradient staged, and this op writes it
  // there instead of into grad_in (writes_staged_input_grad; the max-pool after conv2 of the cifar
  // preset): one pass fewer over the gradient.
  StagedTensor grad_in_staged;
  bool grad_out_staged = false;    // the op after has written this op's output gradient staged
  // The forward's twin of the two above: the op after is a staged conv that takes its input staged,
  // and this op writes it there beside `out` (writes_staged_output; the cifar preset's first layer and
  // the max-pool after conv2): the conv skips its input's staging pass.
  StagedTensor out_staged;
  bool in_staged = false;          // the op before has written this op's input staged
  // The op after is a 2x2/2 max-pool that this op (a staged conv + ReLU) runs in its store
  // (pools_output): it writes the pool's output, argmax and out_staged, and not `out` (the cifar
  // preset's conv2). out null: not.
  PooledOutput pooled;
  bool pooled_before = false;      // the op before has pooled in its store: this max-pool has no forward
  // The op after left this op's output gradient in its split partials, which this op adds itself
  // (reads_split_output_grad; the max-pool before the cifar preset's conv3 at small batches): grad_out
  // is not written. Its twin: this op leaves its input gradient so (input_grad_partials), and does
  // not write grad_in.
  SplitPartials grad_out_partials;
  bool grad_in_partials = false;
};

// The overlapped step's ready points (gradient_ready.hpp), as the backward reaches them. An op with
// parameters calls ready() once per range it finishes, in the order of gradient_ready_points. With
// a listener that reduces early, the listener is told at that point of the main stream (a range
// computed on the side stream makes the main stream wait for it first) and, on a timed step, the
// compute still to come after it is measured; without one, ready() does nothing, so the step keeps
// its fastest order. The last range needs no call of the listener: all_gradients_ready() follows.
class ReadyReporter {
 public:
  ReadyReporter() = default;
  // listener: null when it does not reduce early. points: how many ranges the backward reports.
  // timers: one pair per point, or null (not timed).
  ReadyReporter(GradientReadyListener* listener, const OpShared* shared, std::size_t points,
                std::vector<std::unique_ptr<TimingEventPair>>* timers);
  // True when the ranges are reported: the seed's fused op then computes its fc layer's gradients first.
  bool early() const { return listener_ != nullptr; }
  void ready(std::int64_t offset, std::int64_t count, bool on_side_stream);
  // Ends the timed intervals (after the whole backward, on the main stream).
  void finish();

 private:
  GradientReadyListener* listener_ = nullptr;
  const OpShared* shared_ = nullptr;
  std::size_t points_ = 0;
  std::vector<std::unique_ptr<TimingEventPair>>* timers_ = nullptr;
  std::size_t next_ = 0;
};

class DeviceOp {
 public:
  explicit DeviceOp(const Op& op) : reads_data_(op.reads_data), needs_input_grad_(op.needs_input_grad) {}
  virtual ~DeviceOp() = default;
  DeviceOp(const DeviceOp&) = delete;
  DeviceOp& operator=(const DeviceOp&) = delete;

  // Floats per sample of its output (and of the output's gradient); 0: it has none.
  std::int64_t out_size() const { return out_size_; }
  // Its output is a ReLU's output (a folded one, or a ReLU op): the next op masks its input gradient.
  bool output_is_relu() const { return output_is_relu_; }
  // The first op, reading the batch's uint8 samples itself (no gathered float input).
  bool reads_data() const { return reads_data_; }
  bool needs_input_grad() const { return needs_input_grad_; }
  // It queues work on the side stream.
  bool uses_side_stream() const { return uses_side_stream_; }
  // Where its output gradient may be written staged for a batch of n (staged products: ProductOp); words
  // null: not.
  virtual StagedTensor staged_output_grad(std::int64_t /*n*/) const { return {}; }
  // It can write its input gradient into the op before's StagedTensor (OpTensors::grad_in_staged).
  virtual bool writes_staged_input_grad() const { return false; }
  // Where its input gradient for a batch of n may be left in the split partials of its product (a
  // staged conv whose input gradient splits k); sums null: not.
  virtual SplitPartials input_grad_partials(std::int64_t /*n*/) const { return {}; }
  // Where it writes its own input gradient staged, it can add its output gradient from the op after's
  // split partials (OpTensors::grad_out_partials).
  virtual bool reads_split_output_grad() const { return false; }
  // Where its input may be written staged for a batch of n (staged products: ProductOp); words null:
  // not.
  virtual StagedTensor staged_input(std::int64_t /*n*/) const { return {}; }
  // It can write its output into `into`, the op after's staged input, as well (OpTensors::out_staged):
  // `into` has the layout its kernel writes (a conv's NHWC input of the same shape, or an fc layer's
  // one-pixel input, which only a staged product's store can write).
  virtual bool writes_staged_output(const StagedTensor& /*into*/) const { return false; }
  // It is a 2x2/2 max-pool that the op before may run in its store (lending pool_argmax): the backend
  // then offers it to that op (offer_pool_after), before any plan is made.
  virtual bool can_be_pooled_before() const { return false; }
  // The op after it is such a max-pool, in the backend's own sequence of ops (not inside a block).
  virtual void offer_pool_after() {}
  // For a batch of n it can run the 2x2/2 max-pool op after it in its store (OpTensors::pooled).
  virtual bool pools_output(std::int64_t /*n*/) const { return false; }
  // A max-pool's argmax, for the op before when that op pools in its store; null: not a max-pool.
  virtual std::int32_t* pool_argmax() const { return nullptr; }

  struct Prepared {
    bool moved = false;                 // a buffer of its own moved
    std::int64_t workspace_floats = 0;  // what its plan for this n needs of OpShared::workspace
  };
  // Launch plans (kept per batch size) and its own buffers for a batch of n.
  virtual Prepared prepare(std::int64_t /*n*/) { return {}; }
  // Training steps only: queued right after the index copy, before the input's gather.
  virtual void start_step(const DeviceBatch& /*batch*/) {}
  // batch.training false: an evaluation chunk (no gradient follows).
  virtual void forward(const DeviceBatch& batch, const OpTensors& t) = 0;
  // Gradients are OVERWRITTEN with the batch's sums.
  virtual void backward(const DeviceBatch& /*batch*/, const OpTensors& /*t*/, ReadyReporter& /*ready*/) {}
  // The ranges of the gradient buffer its backward finishes, in that order (offset, count).
  virtual std::vector<GradientReadyPoint> ready_ranges() const { return {}; }
  // How its convolutions and matrix products run for a batch of n, per pass, for the settings block
  // ("forward mma.bf16 128x64, ..."); empty for an op with none (ReLU, pooling, the loss).
  virtual std::string implementation(std::int64_t /*n*/) const { return ""; }

 protected:
  std::int64_t out_size_ = 0;
  bool output_is_relu_ = false;
  bool uses_side_stream_ = false;

 private:
  bool reads_data_;
  bool needs_input_grad_;
};

// A layer's weights and bias, [weight_offset, bias end) of the flat buffer, as a ready range.
GradientReadyPoint param_range(const Layer& layer);

// `into` is the staged NHWC layout of a tensor of `shape` (its pixels and padded channels): what the
// max-pool's and the fused first layer's staged forwards write. An fc layer run as a 1x1 conv after
// them takes its input as one pixel of C*H*W channels, which they do not write.
bool is_staged_layout_of(const StagedTensor& into, const TensorShape& shape);

// What the conv and fc ops share: one layer with weights and a bias, run as the planned products of
// layer_ops.hpp with its ReLU folded into the store (relu_after); launch plans kept per batch size;
// the weight gradient beside the input gradient (OpShared::weight_grad_place), and the layer's
// parameters one ready range.
class ProductOp : public DeviceOp {
 public:
  ProductOp(const Op& op, const Network& network, OpShared& shared);
  ~ProductOp() override;

  // The plans for a batch of n, and where they are staged (tf32, bf16: layer_ops.hpp) the staged
  // copies, sized for the largest batch so far.
  Prepared prepare(std::int64_t n) override;
  // Staged products' weights change only in the update, so a training step stages them here, at its
  // start, on the side stream, where the staging runs beside the first layers' forward instead of on
  // the main chain right before the layer's product (two launches of about 4 us a step on the cifar
  // preset's chain at batch 128, where the step is about 30 short kernels in series). An evaluation
  // stages them in its forward.
  void start_step(const DeviceBatch& batch) override;
  // Where the layer runs staged products (a conv, or an fc layer as a 1x1 one), its staged output
  // gradient, which the op after may write (a max-pool's backward, fc_softmax), and its staged input,
  // which the op before may write (the first layer's fused op, a max-pool, a staged product's forward).
  StagedTensor staged_output_grad(std::int64_t n) const override;
  StagedTensor staged_input(std::int64_t n) const override;
  // A staged product's forward store writes the staged input of a staged product after it, beside its
  // own output (the cifar preset's conv3 into fc1's: a staging launch fewer on the step's chain), for
  // any view of its output as [channels, pixels] (StagedScatter).
  // Its input-gradient store does not write the staged output gradient of the one before: that
  // transpose into NHWC as scattered 2- and 4-byte stores (where the staging pass writes whole chunks)
  // made the step about 4-11% slower at batch 128 and up (nvidia-h100-x1, 2026-11-28,
  // docs/PERFORMANCE.md, the sixteenth part).
  bool writes_staged_output(const StagedTensor& into) const override;
  std::vector<GradientReadyPoint> ready_ranges() const override { return {param_range(layer_)}; }
  std::string implementation(std::int64_t n) const override;

 protected:
  // The launch shapes of the layer's three products for a batch of n.
  virtual LayerPlans plan(std::int64_t n) const = 0;
  // plan() stages at every batch size.
  virtual bool staged_products() const = 0;
  // The convolution whose staged products run the layer, where plan() stages: a conv's own, or an fc
  // layer's as a 1x1 convolution.
  virtual ConvShape staged_conv() const;
  StagedBuffers staged() const {
    return StagedBuffers{staged_input_.get(), staged_grad_.get(), staged_weight_.get()};
  }
  // For the forward, once, before its products: whether start_step staged this step's weights; if so,
  // the main stream waits for them here.
  bool weights_staged_at_start();
  // The forward's launch in implementation()'s line.
  virtual std::string forward_description(const LayerPlans& plans) const { return plans.forward.describe(); }
  const LayerPlans& plans_for(std::int64_t n) const { return plans_.at(n); }
  // The parameters' range is final (in stream order) once the products of backward() are queued.
  void report_ready(ReadyReporter& ready, const OpShared::Place& weight_grad_place) const;
  const float* weight() const { return shared_.params + layer_.weight_offset; }
  const float* bias() const { return shared_.params + layer_.bias_offset; }
  float* grad_weight() const { return shared_.grads + layer_.weight_offset; }
  float* grad_bias() const { return shared_.grads + layer_.bias_offset; }

  const Layer& layer_;
  const bool relu_;
  OpShared& shared_;

 private:
  std::map<std::int64_t, LayerPlans> plans_;  // by batch size
  // The staged input (read again by the weight gradient), output gradient and weights.
  DeviceBuffer<std::uint32_t> staged_input_, staged_grad_, staged_weight_;
  cudaEvent_t weights_staged_ = nullptr;  // recorded on the side stream by start_step
  bool weights_pending_ = false;          // start_step staged them; the forward has not waited yet
};

// The table: the op for op.kind (and op.layer), running network's layers (which must outlive it).
std::unique_ptr<DeviceOp> make_device_op(const Op& op, const Network& network, OpShared& shared);

// The factories of the layers' ops (kernels/layers/<name>.cu, one per line of layers.def) and of the
// loss and fused ops (kernels/cuda/op_<name>.cu).
#define CNN_LAYER(name, Kind) \
  std::unique_ptr<DeviceOp> make_##name##_op(const Op& op, const Network& network, OpShared& shared);
#define CNN_VIEW_LAYER(name, Kind)
#include "cnn/layers.def"
#undef CNN_LAYER
#undef CNN_VIEW_LAYER
std::unique_ptr<DeviceOp> make_softmax_cross_entropy_op(const Op& op, const Network& network, OpShared& shared);
std::unique_ptr<DeviceOp> make_conv_relu_pool_op(const Op& op, const Network& network, OpShared& shared);
std::unique_ptr<DeviceOp> make_conv_relu_pool_fc_softmax_op(const Op& op, const Network& network, OpShared& shared);
std::unique_ptr<DeviceOp> make_fc_softmax_op(const Op& op, const Network& network, OpShared& shared);

}  // namespace cnn::cuda
