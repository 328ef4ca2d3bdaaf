// The network's op plan (op_plan.hpp) on one CPU thread: forward and backward of one micro-batch,
// op after op, each op one CpuOp (cpu_op.hpp, one file per op kind). The CPU backend
// (src/cpu/cpu_backend.cpp) gives every thread its own CpuOpRunner, with its own op objects, and its
// own share of the samples; this file holds no threading and no op kind.
//
// Activations live in one buffer per op. The plain step needs them for one micro-batch at a time. The
// overlapped step runs the forward of every micro-batch of the thread's share first and most of the
// backward later, so the outputs that backward reads are kept for each micro-batch, in slots; every
// other output has a single slot, reused from micro-batch to micro-batch. Private to src/.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/network.hpp"
#include "cnn/op_plan.hpp"
#include "cpu/cpu_op.hpp"

namespace cnn {

class CpuOpRunner {
 public:
  // plan: plan_ops for a CPU target; network must outlive the runner. sized_micro_batch: micro-batches
  // of cpu_micro_batch samples for these ops (`threads`), else kCpuMicroBatchMax (`seq`).
  // label_smoothing: the training loss's (--label-smoothing); evaluation's loss has none.
  CpuOpRunner(const std::vector<Op>& plan, const Network& network, bool sized_micro_batch,
              float label_smoothing = 0.0f);

  std::size_t op_count() const { return ops_.size(); }
  // Samples per micro-batch: gather, forward and backward take at most this many.
  std::int64_t micro_batch() const { return micro_batch_; }
  const CpuOp& op(std::size_t i) const { return *ops_[i]; }

  // The network's running statistics (the backend's state buffer, bn), read and written by the forward.
  void set_state(float* state) { state_ = state; }
  // Where this thread's ops add their parts of sums over the step's slice (bn): set before each
  // training step's forward, cleared (SliceShare{}) for evaluation.
  void set_slice(SliceShare slice) { slice_ = slice; }
  // Makes the micro-batch at least `samples` (a network with bn runs a thread's whole share as one).
  void grow_micro_batch(std::int64_t samples);

  // For the overlapped step: makes room to keep `slots` micro-batches of the outputs the backward
  // reads (see CpuOp) and of the input gradients passed between its backward calls.
  void keep_slots(std::int64_t slots);

  // Gathers data[indices[0..mb)] as normalised floats, and their labels unless images_only (the
  // overlapped backward gathers the images again rather than keeping them).
  // augment (a training batch's, with its samples' origin): applied as the images are gathered.
  void gather(const Dataset& data, const std::int32_t* indices, std::int64_t mb, bool images_only = false,
              const Augment& augment = Augment{}, const MaskOrigin& origin = MaskOrigin{});

  // Every op on the gathered micro-batch, its kept outputs in `slot`; adds loss and correct count to
  // stats. training: the loss op also writes its gradient of the logits.
  // origin: where the micro-batch's samples stand in the training step (dropout's masks).
  void forward(const float* params, std::int64_t mb, std::int64_t slot, bool training, BatchStats& stats,
               const MaskOrigin& origin = MaskOrigin{});

  // The backward of ops[top] down to ops[bottom] for the micro-batch in `slot`, ADDING weight gradients
  // to grads. grad_out: d loss / d output of ops[top] (may be overwritten); the gradient of ops[bottom]'s
  // input goes to bottom_grad_in (nullptr when that op needs none).
  void backward(std::size_t top, std::size_t bottom, std::int64_t mb, std::int64_t slot, float* grad_out,
                float* bottom_grad_in, const float* params, float* grads);

  // d loss / d logits of the micro-batch forwarded last (the loss op's output), where the backward starts.
  float* loss_gradient() { return output(ops_.size() - 1, 0); }
  // The logits of the micro-batch forwarded last, [mb, classes]: the loss op's input (every CPU plan
  // ends with softmax_cross_entropy after the last fc layer, op_plan.hpp). Valid until the next forward.
  const float* logits() { return input_of(ops_.size() - 1, 0); }
  // The overlapped step's gradient of ops[i]'s input (an op with parameters), per slot: written by the
  // backward call that ends at ops[i], read by the next one (keep_slots first).
  float* kept_input_gradient(std::size_t i, std::int64_t slot);

 private:
  void size_buffers(std::int64_t slots, bool input_gradients);
  float* output(std::size_t i, std::int64_t slot) {
    return micro_batch_slot(outputs_[i], ops_[i]->keeps_output(), micro_batch_, ops_[i]->out_size(), slot);
  }
  const float* input_of(std::size_t i, std::int64_t slot) { return i == 0 ? input_.data() : output(i - 1, slot); }

  std::vector<std::unique_ptr<CpuOp>> ops_;
  std::int64_t micro_batch_;
  float label_smoothing_;
  std::vector<float> input_;                              // [mb, C, H, W]
  std::vector<std::uint8_t> labels_;                      // [mb]
  std::vector<std::vector<float>> outputs_;               // per op: [slots, mb, out_size]
  std::vector<std::vector<float>> input_gradients_;       // overlapped step, ops needing one: [slots, mb, in_size]
  std::vector<float> grad_a_, grad_b_;                    // activation gradients inside one backward call
  std::int64_t kept_slots_ = 0;  // none until the first overlapped step
  float* state_ = nullptr;
  SliceShare slice_;
};

}  // namespace cnn
