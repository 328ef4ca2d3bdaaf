// The residual block on the device, the twin of src/layers/residual.cpp: out = body(x) + shortcut(x),
// the body and the shortcut each a list of ops (Op::body, Op::shortcut) run by this op over buffers
// of its own, with the same conventions as the backend's (device_op.hpp): an inner op reads its
// input's gradient-mask flag from the op before it, and a gradient handed to an op whose output went
// through a ReLU is taken before that ReLU.
#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/device_op.hpp"
#include "cuda/launch.hpp"
#include "ops/layer_ops.hpp"

namespace cnn::cuda {

// ---- the kernels

namespace {

__global__ void residual_sum_kernel(float* out, const float* body, const float* shortcut, std::int64_t count) {
  start_after_previous_kernel();
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[e] = body[e] + shortcut[e];
}

// grad_in += grad where the input passed (mask == nullptr, or mask > 0: the input is a ReLU's output).
__global__ void add_gradient_kernel(float* grad_in, const float* grad, const float* mask, std::int64_t count) {
  start_after_previous_kernel();
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    if (mask == nullptr || mask[e] > 0.0f) grad_in[e] += grad[e];
}

void residual_sum(float* out, const float* body, const float* shortcut, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  launch_dependent(residual_sum_kernel, grid_for(count), kBlockThreads, 0, stream, out, body, shortcut, count);
  CNN_CHECK_LAUNCH();
}

void add_gradient(float* grad_in, const float* grad, const float* mask, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  launch_dependent(add_gradient_kernel, grid_for(count), kBlockThreads, 0, stream, grad_in, grad, mask, count);
  CNN_CHECK_LAUNCH();
}

}  // namespace

// ---- the op

namespace {

// One branch of the block (its body, or its shortcut): the ops and the buffers between them.
// activations[j] is op j's output, gradients[j] dL/d(activations[j]) (taken before a folded ReLU).
struct Branch {
  Network layers;  // the inner ops hold references to its layers
  std::vector<std::unique_ptr<DeviceOp>> ops;
  std::vector<DeviceBuffer<float>> activations, gradients;
};

class ResidualOp final : public DeviceOp {
 public:
  ResidualOp(const Op& op, const Network& network, OpShared& shared)
      : DeviceOp(op), block_(network.layers[op.first_layer]), shared_(shared) {
    make_branch(body_, op.body, block_.body, network);
    make_branch(shortcut_, op.shortcut, block_.shortcut, network);
    out_size_ = block_.out.size();
  }

  Prepared prepare(std::int64_t n) override {
    Prepared all;
    for (Branch* branch : {&body_, &shortcut_})
      for (std::size_t j = 0; j < branch->ops.size(); ++j) {
        const Prepared p = branch->ops[j]->prepare(n);
        all.moved |= p.moved;
        all.workspace_floats = std::max(all.workspace_floats, p.workspace_floats);
        all.moved |= branch->activations[j].reserve(n * branch->ops[j]->out_size());
        all.moved |= branch->gradients[j].reserve(n * branch->ops[j]->out_size());
      }
    if (!shortcut_.ops.empty() && needs_input_grad()) all.moved |= shortcut_grad_in_.reserve(n * block_.in.size());
    return all;
  }

  void start_step(const DeviceBatch& batch) override {
    for (Branch* branch : {&body_, &shortcut_})
      for (const auto& inner : branch->ops) inner->start_step(batch);
  }

  void forward(const DeviceBatch& batch, const OpTensors& t) override {
    const float* body = run_forward(body_, batch, t);
    const float* shortcut = run_forward(shortcut_, batch, t);
    residual_sum(t.out, body, shortcut, batch.n * out_size_, shared_.stream);
  }

  // The body writes the input's gradient (masked by its first op when the input is a ReLU's), and
  // the shortcut's is added to it: the identity's is grad_out itself.
  void backward(const DeviceBatch& batch, const OpTensors& t, ReadyReporter& ready) override {
    run_backward(body_, batch, t, t.grad_in, ready);
    if (shortcut_.ops.empty()) {
      if (t.grad_in != nullptr)
        add_gradient(t.grad_in, t.grad_out, t.input_is_relu ? t.in : nullptr, batch.n * block_.in.size(),
                     shared_.stream);
      return;
    }
    float* shortcut_grad = t.grad_in != nullptr ? shortcut_grad_in_.get() : nullptr;
    run_backward(shortcut_, batch, t, shortcut_grad, ready);
    if (shortcut_grad != nullptr) add_gradient(t.grad_in, shortcut_grad, nullptr, batch.n * block_.in.size(), shared_.stream);
  }

  std::string implementation(std::int64_t n) const override {
    std::string text;
    for (const Branch* branch : {&body_, &shortcut_})
      for (const auto& inner : branch->ops) {
        const std::string part = inner->implementation(n);
        if (part.empty()) continue;
        text += (text.empty() ? "" : " | ") + std::string(branch == &body_ ? "body: " : "shortcut: ") + part;
      }
    return text;
  }

  // In the order backward() finishes them: the body's ops from the last, then the shortcut's.
  std::vector<GradientReadyPoint> ready_ranges() const override {
    std::vector<GradientReadyPoint> ranges;
    for (const Branch* branch : {&body_, &shortcut_})
      for (std::size_t j = branch->ops.size(); j-- > 0;)
        for (const GradientReadyPoint& range : branch->ops[j]->ready_ranges()) ranges.push_back(range);
    return ranges;
  }

 private:
  void make_branch(Branch& branch, const std::vector<Op>& plan, const std::vector<Layer>& layers,
                   const Network& network) {
    branch.layers = block_network(network, block_, layers);
    for (const Op& inner : plan) {
      branch.ops.push_back(make_device_op(inner, branch.layers, shared_));
      uses_side_stream_ |= branch.ops.back()->uses_side_stream();
    }
    branch.activations.resize(plan.size());
    branch.gradients.resize(plan.size());
  }

  OpTensors inner_tensors(Branch& branch, std::size_t j, const OpTensors& t, float* first_grad_in) const {
    OpTensors inner;
    inner.in = j == 0 ? t.in : branch.activations[j - 1].get();
    inner.out = branch.activations[j].get();
    inner.grad_in = !branch.ops[j]->needs_input_grad() ? nullptr : j == 0 ? first_grad_in : branch.gradients[j - 1].get();
    inner.grad_out = branch.gradients[j].get();
    inner.input_is_relu = j == 0 ? t.input_is_relu : branch.ops[j - 1]->output_is_relu();
    return inner;
  }

  // The branch's output: its last op's, or the block's input for the identity.
  const float* run_forward(Branch& branch, const DeviceBatch& batch, const OpTensors& t) {
    for (std::size_t j = 0; j < branch.ops.size(); ++j) branch.ops[j]->forward(batch, inner_tensors(branch, j, t, nullptr));
    return branch.ops.empty() ? t.in : branch.activations.back().get();
  }

  // The branch's backward from dL/d out (t.grad_out); its first op writes grad_in.
  void run_backward(Branch& branch, const DeviceBatch& batch, const OpTensors& t, float* grad_in,
                    ReadyReporter& ready) {
    if (branch.ops.empty()) return;
    // The top gradient, taken before the ReLU when the last op folded one in.
    const std::size_t last = branch.ops.size() - 1;
    const float* top = t.grad_out;
    if (branch.ops[last]->output_is_relu()) {
      relu_backward(branch.gradients[last].get(), t.grad_out, branch.activations[last].get(), batch.n * out_size_,
                    shared_.stream);
      top = branch.gradients[last].get();
    }
    for (std::size_t j = branch.ops.size(); j-- > 0;) {
      OpTensors inner = inner_tensors(branch, j, t, grad_in);
      if (j == last) inner.grad_out = top;
      branch.ops[j]->backward(batch, inner, ready);
    }
  }

  const Layer& block_;
  OpShared& shared_;
  Branch body_, shortcut_;
  DeviceBuffer<float> shortcut_grad_in_;  // the shortcut's dL/d input, before it is added
};

}  // namespace

std::unique_ptr<DeviceOp> make_residual_op(const Op& op, const Network& network, OpShared& shared) {
  return std::make_unique<ResidualOp>(op, network, shared);
}

}  // namespace cnn::cuda
