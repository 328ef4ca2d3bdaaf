// The residual block on the host: its grammar res[<layers>] and shape (the registry entry
// residual_layer, layers.def), and its CPU op. The block is a composite layer: its body is a list of
// layers (Layer::body) that the op runs with the ops of the top level, and its output is
//   out = body(x) + shortcut(x),
// where the shortcut is the identity when the body keeps the shape, else a 1x1 conv whose stride
// matches the body's output (Layer::shortcut), as in ResNet's projection shortcut. A ReLU after the
// sum is the layer after the block: res[conv3x3:64/p1 relu conv3x3:64/p1] relu. Twin of
// kernels/layers/residual.cu.
#include "cnn/layer_registry.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cpu/cpu_op.hpp"

namespace cnn {

// ---- the registry entry

namespace {

std::string resolve_residual(const LayerToken&, Layer& layer) {
  if (layer.body.empty()) return "a res block needs at least one layer";
  const TensorShape in = layer.in;
  const TensorShape out = layer.body.back().out;
  layer.out = out;
  layer.shortcut.clear();
  if (out.channels == in.channels && out.height == in.height && out.width == in.width) return "";
  // A 1x1 conv with stride S maps H to (H - 1) / S + 1.
  for (int stride = 1; stride <= std::max(in.height, in.width); ++stride) {
    if ((in.height - 1) / stride + 1 != out.height || (in.width - 1) / stride + 1 != out.width) continue;
    Layer conv;
    conv.kind = LayerKind::kConv;
    conv.in = in;
    conv.token = layer.token;
    conv.column = layer.column;
    LayerToken t;
    t.kernel = 1;
    t.filters = out.channels;
    t.stride = stride;
    const std::string misfit = conv_layer.resolve(t, conv);
    if (!misfit.empty()) return misfit;
    layer.shortcut.push_back(conv);
    return "";
  }
  return "its layers turn " + shape_text(in) + " into " + shape_text(out) +
         ", which no 1x1 conv shortcut (stride S) can match";
}

std::string canonical_residual(const Layer& layer) {
  std::string text = "res[";
  for (const Layer& inner : layer.body) {
    const std::string token = layer_def(inner.kind).canonical(inner);
    if (token.empty()) continue;
    if (text.size() > 4) text += ' ';
    text += token;
  }
  return text + "]";
}

}  // namespace

// No parameters of its own (param_prefix nullptr): the builder lays out the body's and the shortcut's.
const LayerDef residual_layer = {LayerKind::kResidual, true, "residual", "res[<layers>]", "res[", nullptr,
                                 LayerInput::kSpatial, resolve_residual, canonical_residual, nullptr, false,
                                 nullptr, nullptr};

// ---- the CPU op

namespace {

// The block's ops on one thread: its body and its shortcut, each a list of ops (the plans Op::body
// and Op::shortcut) run over buffers of the block's own. Everything the block's backward reads (the
// inner activations, the inner ops' own data) is the block's own data: the overlapped step keeps it
// per micro-batch slot, like a maxpool's winners.
class ResidualOp final : public CpuOp {
 public:
  ResidualOp(const Op& op, const Network& network)
      : CpuOp(op, network),
        body_net_(block_network(network, layer(), layer().body)),
        shortcut_net_(block_network(network, layer(), layer().shortcut)),
        body_(make_inner_ops(op.body, body_net_)),
        shortcut_(make_inner_ops(op.shortcut, shortcut_net_)),
        body_out_(body_.size()),
        shortcut_out_(shortcut_.size()) {
    has_own_data_ = true;
    size_slots(1);
  }

  void set_micro_batch(std::int64_t samples) override {
    CpuOp::set_micro_batch(samples);
    for (const auto* ops : {&body_, &shortcut_})
      for (const std::unique_ptr<CpuOp>& inner : *ops) inner->set_micro_batch(samples);
  }

  void size_slots(std::int64_t slots) override {
    const std::int64_t kept = keeps_own_data() ? slots : 1;
    std::int64_t largest = std::max(in_size(), out_size());
    for (auto [ops, outputs] : {std::pair{&body_, &body_out_}, std::pair{&shortcut_, &shortcut_out_}})
      for (std::size_t j = 0; j < ops->size(); ++j) {
        CpuOp& inner = *(*ops)[j];
        inner.set_kept(false, keeps_own_data());
        inner.size_slots(slots);
        (*outputs)[j].resize(static_cast<std::size_t>(kept * micro_batch() * inner.out_size()));
        largest = std::max({largest, inner.in_size(), inner.out_size()});
      }
    for (std::vector<float>* buffer : {&top_grad_, &grad_a_, &grad_b_, &shortcut_grad_})
      buffer->resize(static_cast<std::size_t>(micro_batch() * largest));
  }

  void forward(const CpuForward& f) override {
    const float* body = run_forward(body_, body_out_, f);
    const float* shortcut = run_forward(shortcut_, shortcut_out_, f);
    const std::int64_t count = f.mb * out_size();
#pragma omp simd
    for (std::int64_t i = 0; i < count; ++i) f.out[i] = body[i] + shortcut[i];
  }

  float* backward(const CpuBackward& t) override {
    // d out / d body = d out / d shortcut = 1: both get grad_out. The body's ops may overwrite the
    // gradient they read, so the body gets a copy, and the shortcut the original.
    const std::int64_t out_count = t.mb * out_size();
    std::copy(t.grad_out, t.grad_out + out_count, top_grad_.data());
    run_backward(body_, body_out_, t, top_grad_.data(), t.grad_in);
    if (!needs_input_grad()) {
      run_backward(shortcut_, shortcut_out_, t, t.grad_out, nullptr);
      return nullptr;
    }
    const float* shortcut_grad = t.grad_out;  // the identity
    if (!shortcut_.empty()) {
      run_backward(shortcut_, shortcut_out_, t, t.grad_out, shortcut_grad_.data());
      shortcut_grad = shortcut_grad_.data();
    }
    const std::int64_t in_count = t.mb * in_size();
#pragma omp simd
    for (std::int64_t i = 0; i < in_count; ++i) t.grad_in[i] += shortcut_grad[i];
    return t.grad_in;
  }

 private:
  static std::vector<std::unique_ptr<CpuOp>> make_inner_ops(const std::vector<Op>& plan, const Network& net) {
    std::vector<std::unique_ptr<CpuOp>> ops;
    for (const Op& inner : plan) ops.push_back(make_cpu_op(inner, net));
    return ops;
  }

  float* output(std::vector<float>& buffer, const CpuOp& inner, std::int64_t slot) {
    return micro_batch_slot(buffer, keeps_own_data(), micro_batch(), inner.out_size(), slot);
  }

  // The ops in order from the block's input; returns the last output (the input for no ops: the identity).
  const float* run_forward(std::vector<std::unique_ptr<CpuOp>>& ops, std::vector<std::vector<float>>& outputs,
                           const CpuForward& f) {
    const float* x = f.in;
    for (std::size_t j = 0; j < ops.size(); ++j) {
      CpuForward inner = f;
      inner.in = x;
      inner.out = output(outputs[j], *ops[j], f.slot);
      ops[j]->forward(inner);
      x = inner.out;
    }
    return x;
  }

  // The ops' backward from the last to the first, from grad (d loss / d the last output; may be
  // overwritten); d loss / d the block's input ends in grad_in (nullptr: none is needed).
  void run_backward(std::vector<std::unique_ptr<CpuOp>>& ops, std::vector<std::vector<float>>& outputs,
                    const CpuBackward& t, float* grad, float* grad_in) {
    for (std::size_t j = ops.size(); j-- > 0;) {
      CpuOp& inner = *ops[j];
      // Below the first op with parameters, nothing is left to compute when no gradient leaves the block.
      if (!inner.needs_input_grad() && !inner.has_params()) break;
      const float* in = j == 0 ? t.in : output(outputs[j - 1], *ops[j - 1], t.slot);
      float* into = j == 0 ? grad_in : (grad == grad_a_.data() ? grad_b_.data() : grad_a_.data());
      if (!inner.needs_input_grad()) into = nullptr;
      grad = inner.backward(
          {t.params, t.grads, in, output(outputs[j], inner, t.slot), grad, into, t.mb, t.slot, t.slice});
    }
    // An in-place first op (a relu) leaves it where it read it.
    if (grad_in != nullptr && grad != grad_in) std::copy(grad, grad + t.mb * in_size(), grad_in);
  }

  Network body_net_;      // the inner ops run these layers (they must outlive the ops)
  Network shortcut_net_;
  std::vector<std::unique_ptr<CpuOp>> body_;
  std::vector<std::unique_ptr<CpuOp>> shortcut_;
  std::vector<std::vector<float>> body_out_;      // per inner op: [slots, mb, out_size]
  std::vector<std::vector<float>> shortcut_out_;
  std::vector<float> top_grad_, grad_a_, grad_b_, shortcut_grad_;  // [mb, largest inner size]
};

}  // namespace

std::unique_ptr<CpuOp> make_cpu_residual_op(const Op& op, const Network& network) {
  return std::make_unique<ResidualOp>(op, network);
}

}  // namespace cnn
