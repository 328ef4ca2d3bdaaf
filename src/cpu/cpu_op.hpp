// One op of the network's plan (include/cnn/op_plan.hpp) as the CPU backend runs it, the twin of
// kernels/cuda/device_op.hpp. A layer's op is in the layer's file, src/layers/<name>.cpp (twin:
// kernels/layers/<name>.cu), as make_cpu_<name>_op, which the table make_cpu_op (cpu_op.cpp) finds
// through layers.def; a fused op is src/cpu/op_<name>.cpp with its line in that table. An op class
// says which layer functions (layer_ops.hpp, ops.hpp) it calls, with which buffers.
//
// Every thread's CpuOpRunner (cpu_op_runner.hpp) owns its own op objects: an op owns what it keeps
// for its backward besides its output (the pool winners), the runner owns the activations and the
// gradients passed between ops. The overlapped step keeps one micro-batch's worth of those per slot
// where its backward reads them after later micro-batches ran (keeps_output, keeps_own_data).
// Private to src/.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/dropout_mask.hpp"
#include "cnn/network.hpp"
#include "cnn/op_plan.hpp"
#include "cpu/slice_sums.hpp"

namespace cnn {

// Samples processed together by one thread: the activations of a micro-batch stay in cache, and the
// fc weight gradients are read and written once per micro-batch rather than once per sample. At most
// this many; cpu_micro_batch picks the size for a plan.
inline constexpr std::int64_t kCpuMicroBatchMax = 32;

// Slot `slot` of a buffer of micro-batches of `micro_batch` x `per_sample` values, or its only slot
// when not kept.
template <typename T>
T* micro_batch_slot(std::vector<T>& buffer, bool kept, std::int64_t micro_batch, std::int64_t per_sample,
                    std::int64_t slot) {
  return buffer.data() + (kept ? slot : 0) * micro_batch * per_sample;
}

// One forward call: the micro-batch's tensors (float [mb, size] each).
struct CpuForward {
  const float* params;         // the flat parameter buffer
  const float* in;             // [mb, in_size]
  float* out;                  // [mb, out_size], the micro-batch's slot
  std::int64_t mb;
  std::int64_t slot;           // where the op keeps its own data for this micro-batch
  bool training;               // false: evaluation (the loss writes no gradient, dropout is the identity)
  const std::uint8_t* labels;  // [mb]
  BatchStats* stats;           // the loss adds its loss sum, hits and count
  float label_smoothing;       // of the loss: --label-smoothing when training, 0 when evaluating
  MaskOrigin origin;           // training: the step's key and the micro-batch's first sample (dropout_mask.hpp)
  float* state;                // the network's running statistics (Network::state_count; bn)
  SliceShare slice;            // training: where sums over the whole slice are made (bn)
};

// One backward call. Parameter gradients are ADDED to grads (summed over micro-batches).
struct CpuBackward {
  const float* params;
  float* grads;                // the flat gradient buffer
  const float* in;             // the forward's input and output, of this micro-batch
  const float* out;
  float* grad_out;             // d loss / d out (may be overwritten)
  float* grad_in;              // d loss / d in goes here; nullptr when the op passes none back
  std::int64_t mb;
  std::int64_t slot;
  SliceShare slice;            // where sums over the whole slice are made (bn)
};

class CpuOp {
 public:
  CpuOp(const Op& op, const Network& network);
  virtual ~CpuOp() = default;
  CpuOp(const CpuOp&) = delete;
  CpuOp& operator=(const CpuOp&) = delete;

  std::int64_t in_size() const { return in_size_; }    // floats per sample
  std::int64_t out_size() const { return out_size_; }  // floats per sample (the loss: its gradient of the logits)
  bool needs_input_grad() const { return needs_input_grad_; }
  // Its weights and biases: [param_offset, param_offset + param_count) of the flat buffer.
  bool has_params() const { return param_count_ > 0; }
  std::int64_t param_offset() const { return param_offset_; }
  std::int64_t param_count() const { return param_count_; }
  // Its backward reads its forward output (a ReLU mask, the pooled values).
  bool backward_reads_output() const { return backward_reads_output_; }
  // Read by the overlapped step's backward after later micro-batches' forwards: kept per slot
  // (set once by make_cpu_ops, from where the op stands in the plan).
  bool keeps_output() const { return keeps_output_; }
  bool keeps_own_data() const { return keeps_own_data_; }
  void set_kept(bool output, bool own_data) {
    keeps_output_ = output;
    keeps_own_data_ = own_data && has_own_data_;
  }
  // Samples per micro-batch (cpu_micro_batch), set before size_slots.
  std::int64_t micro_batch() const { return micro_batch_; }
  virtual void set_micro_batch(std::int64_t samples) { micro_batch_ = samples; }

  // Sizes what the op keeps of its own for `slots` micro-batches (1 when not kept).
  virtual void size_slots(std::int64_t /*slots*/) {}
  virtual void forward(const CpuForward& f) = 0;
  // Returns where it wrote d loss / d in (t.grad_in, or t.grad_out for an in-place op).
  virtual float* backward(const CpuBackward& t) = 0;

 protected:
  // The layer that holds its parameters, or its only layer (first_layer of the op).
  const Layer& layer() const { return *layer_; }
  // How many floats of its own data a micro-batch's slot holds, given set_kept.
  std::int64_t slot_values(std::int64_t slots) const {
    return (keeps_own_data_ ? slots : 1) * micro_batch_ * out_size_;
  }
  // Slot `slot` of a buffer of its own data (out_size values per sample).
  template <typename T>
  T* own_slot(std::vector<T>& buffer, std::int64_t slot) {
    return micro_batch_slot(buffer, keeps_own_data_, micro_batch_, out_size_, slot);
  }

  bool backward_reads_output_ = false;  // set by the op's constructor
  bool has_own_data_ = false;           // it keeps data for its backward (argmax) that the overlap must keep per slot

 private:
  const Layer* layer_ = nullptr;
  std::int64_t in_size_ = 0;
  std::int64_t out_size_ = 0;
  bool needs_input_grad_ = false;
  std::int64_t param_offset_ = 0;
  std::int64_t param_count_ = 0;
  bool keeps_output_ = false;
  bool keeps_own_data_ = false;
  std::int64_t micro_batch_ = kCpuMicroBatchMax;
};

// The table: the op for op.kind, running network's layers (which must outlive it).
std::unique_ptr<CpuOp> make_cpu_op(const Op& op, const Network& network);

// Samples per micro-batch for `ops`: the most, up to kCpuMicroBatchMax (halving, down to 8), whose
// activations and their gradients (the ops' outputs, 8 bytes a value) fit kCpuMicroBatchBytes. The
// seed at d 256 on `threads` (346 kB a sample) then runs 16 at a time: 19% less CPU time than 32 on
// the development VM, where d 64 (87 kB) and the cifar preset (190 kB) keep 32, their fastest
// (docs/PERFORMANCE.md). `seq` keeps kCpuMicroBatchMax: the reference's sums do not move.
inline constexpr std::int64_t kCpuMicroBatchBytes = std::int64_t{8} << 20;
std::int64_t cpu_micro_batch(const std::vector<std::unique_ptr<CpuOp>>& ops);

// Every op of `plan` (plan_ops for a CPU target), with what each keeps per slot for the overlapped step.
std::vector<std::unique_ptr<CpuOp>> make_cpu_ops(const std::vector<Op>& plan, const Network& network);

// The factories of the layers' ops (src/layers/<name>.cpp, one per line of layers.def) and of the
// loss and fused ops (src/cpu/op_<name>.cpp).
#define CNN_LAYER(name, Kind) std::unique_ptr<CpuOp> make_cpu_##name##_op(const Op& op, const Network& network);
#define CNN_VIEW_LAYER(name, Kind)
#include "cnn/layers.def"
#undef CNN_LAYER
#undef CNN_VIEW_LAYER
std::unique_ptr<CpuOp> make_cpu_softmax_cross_entropy_op(const Op& op, const Network& network);
std::unique_ptr<CpuOp> make_cpu_conv_relu_pool_op(const Op& op, const Network& network);

}  // namespace cnn
