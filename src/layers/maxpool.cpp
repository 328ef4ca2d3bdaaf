// The maxpool layer on the host: its token maxpool<K>[/s<S>] and shape (the registry entry
// maxpool_layer, layers.def), max-pooling as plain loops, and its CPU op, which keeps each window's
// winner for its backward. Twin of kernels/layers/maxpool.cu.
#include "cnn/layer_registry.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "cnn/layer_ops.hpp"
#include "cpu/cpu_op.hpp"

namespace cnn {

// ---- the registry entry

namespace {

std::string parse_maxpool(const std::string& text, std::size_t pos, LayerToken& t) {
  return read_pool_window(text, pos, t, "maxpool needs a window size (maxpool<K>)", "");
}

std::string resolve_maxpool(const LayerToken& t, Layer& layer) {
  PoolShape& p = layer.pool;
  p.channels = layer.in.channels;
  p.height = layer.in.height;
  p.width = layer.in.width;
  p.size = t.kernel;
  p.stride = t.stride;
  const std::string why = pool_window_fit(p.size, layer.in);
  if (!why.empty()) return why;
  layer.out = {p.channels, p.out_h(), p.out_w()};
  return "";
}

std::string canonical_maxpool(const Layer& layer) {
  std::string text = "maxpool" + std::to_string(layer.pool.size);
  if (layer.pool.stride != layer.pool.size) text += "/s" + std::to_string(layer.pool.stride);
  return text;
}

}  // namespace

const LayerDef maxpool_layer = {LayerKind::kMaxPool, false, "maxpool", "maxpool<K>[/s<S>]", "maxpool", parse_maxpool,
                                 LayerInput::kSpatial, resolve_maxpool, canonical_maxpool, nullptr, false, nullptr, nullptr};

// ---- the math

void maxpool_forward(float* out, std::int32_t* argmax, const float* in, std::int64_t n, const PoolShape& shape) {
  const int oh = shape.out_h(), ow = shape.out_w(), w = shape.width;
  const std::int64_t planes = n * shape.channels;
  const std::int64_t in_plane = static_cast<std::int64_t>(shape.height) * w;
  const std::int64_t out_plane = static_cast<std::int64_t>(oh) * ow;
  for (std::int64_t pl = 0; pl < planes; ++pl) {
    const float* src = in + pl * in_plane;
    float* dst = out + pl * out_plane;
    std::int32_t* arg = argmax + pl * out_plane;
    for (int py = 0; py < oh; ++py)
      for (int px = 0; px < ow; ++px) {
        const int y0 = py * shape.stride, x0 = px * shape.stride;
        std::int32_t best_index = y0 * w + x0;
        float best = src[best_index];
        for (int a = 0; a < shape.size; ++a)
          for (int b = 0; b < shape.size; ++b) {
            const std::int32_t index = (y0 + a) * w + (x0 + b);
            if (src[index] > best) {  // strict: the first maximum wins
              best = src[index];
              best_index = index;
            }
          }
        dst[py * ow + px] = best;
        arg[py * ow + px] = best_index;
      }
  }
}

void maxpool_backward(float* grad_in, const float* grad_out, const std::int32_t* argmax, std::int64_t n,
                      const PoolShape& shape) {
  const std::int64_t planes = n * shape.channels;
  const std::int64_t in_plane = static_cast<std::int64_t>(shape.height) * shape.width;
  const std::int64_t out_plane = static_cast<std::int64_t>(shape.out_h()) * shape.out_w();
  std::fill(grad_in, grad_in + planes * in_plane, 0.0f);
  for (std::int64_t pl = 0; pl < planes; ++pl) {
    float* dst = grad_in + pl * in_plane;
    const float* src = grad_out + pl * out_plane;
    const std::int32_t* arg = argmax + pl * out_plane;
    for (std::int64_t o = 0; o < out_plane; ++o) dst[arg[o]] += src[o];
  }
}

// ---- the CPU op

namespace {

class MaxPoolOp final : public CpuOp {
 public:
  MaxPoolOp(const Op& op, const Network& network) : CpuOp(op, network) { has_own_data_ = true; }

  void size_slots(std::int64_t slots) override { argmax_.resize(static_cast<std::size_t>(slot_values(slots))); }

  void forward(const CpuForward& f) override {
    maxpool_forward(f.out, argmax(f.slot), f.in, f.mb, layer().pool);
  }

  float* backward(const CpuBackward& t) override {
    maxpool_backward(t.grad_in, t.grad_out, argmax(t.slot), t.mb, layer().pool);
    return t.grad_in;
  }

 private:
  std::int32_t* argmax(std::int64_t slot) { return own_slot(argmax_, slot); }

  std::vector<std::int32_t> argmax_;  // [slots, mb, out_size]
};

}  // namespace

std::unique_ptr<CpuOp> make_cpu_maxpool_op(const Op& op, const Network& network) {
  return std::make_unique<MaxPoolOp>(op, network);
}

}  // namespace cnn
