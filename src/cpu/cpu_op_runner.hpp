// The network's op plan (op_plan.hpp) on one CPU thread: forward and backward of one micro-batch,
// op after op, with the ops of ops.hpp and layer_ops.hpp. The CPU backend (src/cpu/cpu_backend.cpp) gives
// every thread its own CpuOpRunner and its own share of the samples; this file holds no threading.
//
// Activations live in one buffer per op. The plain step needs them for one micro-batch at a time. The
// overlapped step runs the forward of every micro-batch of the thread's share first and most of the
// backward later, so the outputs that backward reads are kept for each micro-batch, in slots; every
// other output has a single slot, reused from micro-batch to micro-batch. Private to src/.
#pragma once

#include <cstdint>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/network.hpp"
#include "cnn/op_plan.hpp"

namespace cnn {

// Samples processed together by one thread: the activations of a micro-batch stay in cache, and the
// fc weight gradients are read and written once per micro-batch rather than once per sample.
inline constexpr std::int64_t kCpuMicroBatch = 32;

// One op of the plan with what the CPU loop needs to run it.
struct CpuOp {
  OpKind kind = OpKind::kRelu;
  const Layer* layer = nullptr;  // the layer it runs (kConvReluPool: its conv); nullptr for the loss
  SeedModel fused_shape;         // kConvReluPool: the shape conv_relu_pool_forward/backward take
  std::int64_t in_size = 0;      // floats per sample
  std::int64_t out_size = 0;     // floats per sample (the loss: its gradient of the logits)
  bool needs_input_grad = false;
  // Read by the overlapped step's backward after the forward of later micro-batches ran, that is by
  // an op below the last one with parameters: the output (a relu mask, the pooled values, or the input
  // of an op with parameters), and the pool winners.
  bool keeps_output = false;
  bool keeps_argmax = false;
  // Its weights and biases: [param_offset, param_offset + param_count) of the flat buffer.
  std::int64_t param_offset = 0;
  std::int64_t param_count = 0;

  bool has_params() const { return param_count > 0; }
};

// The plan of `network` for `target`, resolved against its layers (which must outlive the result).
std::vector<CpuOp> plan_cpu_ops(const Network& network, FusionTarget target);

class CpuOpRunner {
 public:
  CpuOpRunner(const std::vector<CpuOp>& ops, const Network& network);

  // For the overlapped step: makes room to keep `slots` micro-batches of the outputs the backward
  // reads (see CpuOp) and of the input gradients passed between its backward calls.
  void keep_slots(std::int64_t slots);

  // Gathers data[indices[0..mb)] as normalised floats, and their labels unless images_only (the
  // overlapped backward gathers the images again rather than keeping them).
  void gather(const Dataset& data, const std::int32_t* indices, std::int64_t mb, bool images_only = false);

  // Every op on the gathered micro-batch, its kept outputs in `slot`; adds loss and correct count to
  // stats. training: the loss op also writes its gradient of the logits.
  void forward(const float* params, std::int64_t mb, std::int64_t slot, bool training, BatchStats& stats);

  // The backward of ops[top] down to ops[bottom] for the micro-batch in `slot`, ADDING weight gradients
  // to grads. grad_out: d loss / d output of ops[top] (may be overwritten); the gradient of ops[bottom]'s
  // input goes to bottom_grad_in (nullptr when that op needs none).
  void backward(std::size_t top, std::size_t bottom, std::int64_t mb, std::int64_t slot, float* grad_out,
                float* bottom_grad_in, const float* params, float* grads);

  // d loss / d logits of the micro-batch forwarded last (the loss op's output), where the backward starts.
  float* loss_gradient() { return output(ops_.size() - 1, 0); }
  // The overlapped step's gradient of ops[i]'s input (an op with parameters), per slot: written by the
  // backward call that ends at ops[i], read by the next one (keep_slots first).
  float* kept_input_gradient(std::size_t i, std::int64_t slot);

 private:
  void size_buffers(std::int64_t slots, bool input_gradients);
  float* output(std::size_t i, std::int64_t slot);
  const float* input_of(std::size_t i, std::int64_t slot) { return i == 0 ? input_.data() : output(i - 1, slot); }
  template <typename T>
  T* slot_of(std::vector<T>& buffer, bool kept, std::int64_t per_sample, std::int64_t slot) {
    return buffer.data() + (kept ? slot : 0) * kCpuMicroBatch * per_sample;
  }

  const std::vector<CpuOp>& ops_;
  int classes_;
  std::vector<float> input_;                              // [mb, C, H, W]
  std::vector<std::uint8_t> labels_;                      // [mb]
  std::vector<std::vector<float>> outputs_;               // per op: [slots, mb, out_size]
  std::vector<std::vector<std::int32_t>> pool_argmax_;    // maxpool ops: [slots, mb, out_size]
  std::vector<std::vector<std::uint8_t>> fused_argmax_;   // conv_relu_pool ops: [slots, mb, out_size]
  std::vector<std::vector<float>> input_gradients_;       // overlapped step, ops needing one: [slots, mb, in_size]
  std::vector<float> grad_a_, grad_b_;                    // activation gradients inside one backward call
  std::int64_t kept_slots_ = 0;  // none until the first overlapped step
};

}  // namespace cnn
