// The avgpool layer on the host: its tokens avgpool (global) and avgpool<K>[/s<S>] and their shape
// (the registry entry avgpool_layer, layers.def), average pooling as plain loops, and its CPU op.
// Twin of kernels/layers/avgpool.cu.
#include "cnn/layer_registry.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "cnn/layer_ops.hpp"
#include "cpu/cpu_op.hpp"

namespace cnn {

// ---- the registry entry

namespace {

// kernel 0: the global pool (avgpool alone).
std::string parse_avgpool(const std::string& text, std::size_t pos, LayerToken& t) {
  if (pos == text.size()) {
    t.kernel = 0;
    return "";
  }
  return read_pool_window(text, pos, t, "avgpool takes a window size or nothing (avgpool, avgpool<K>[/s<S>])",
                          " (avgpool alone pools globally)");
}

std::string resolve_avgpool(const LayerToken& t, Layer& layer) {
  AvgPoolShape& p = layer.avg_pool;
  p.channels = layer.in.channels;
  p.height = layer.in.height;
  p.width = layer.in.width;
  p.global = t.kernel == 0;
  if (p.global) {
    p.window_h = p.height;
    p.window_w = p.width;
    p.stride = 1;
  } else {
    p.window_h = p.window_w = t.kernel;
    p.stride = t.stride;
    const std::string why = pool_window_fit(t.kernel, layer.in);
    if (!why.empty()) return why;
  }
  layer.out = {p.channels, p.out_h(), p.out_w()};
  return "";
}

std::string canonical_avgpool(const Layer& layer) {
  const AvgPoolShape& p = layer.avg_pool;
  if (p.global) return "avgpool";
  std::string text = "avgpool" + std::to_string(p.window_h);
  if (p.stride != p.window_h) text += "/s" + std::to_string(p.stride);
  return text;
}

}  // namespace

const LayerDef avgpool_layer = {LayerKind::kAvgPool, false, "avgpool", "avgpool[<K>[/s<S>]]", "avgpool", parse_avgpool,
                                 LayerInput::kSpatial, resolve_avgpool, canonical_avgpool, nullptr, false, nullptr, nullptr};

// ---- the math

void avgpool_forward(float* out, const float* in, std::int64_t n, const AvgPoolShape& shape) {
  const int oh = shape.out_h(), ow = shape.out_w(), w = shape.width;
  const float scale = shape.scale();
  const std::int64_t planes = n * shape.channels;
  const std::int64_t in_plane = static_cast<std::int64_t>(shape.height) * w;
  const std::int64_t out_plane = static_cast<std::int64_t>(oh) * ow;
  for (std::int64_t pl = 0; pl < planes; ++pl) {
    const float* src = in + pl * in_plane;
    float* dst = out + pl * out_plane;
    for (int py = 0; py < oh; ++py)
      for (int px = 0; px < ow; ++px) {
        const int y0 = py * shape.stride, x0 = px * shape.stride;
        float sum = 0.0f;
        for (int a = 0; a < shape.window_h; ++a)
          for (int b = 0; b < shape.window_w; ++b) sum += src[(y0 + a) * w + (x0 + b)];
        dst[py * ow + px] = sum * scale;
      }
  }
}

void avgpool_backward(float* grad_in, const float* grad_out, std::int64_t n, const AvgPoolShape& shape) {
  const int h_in = shape.height, w_in = shape.width, oh = shape.out_h(), ow = shape.out_w(), s = shape.stride;
  const float scale = shape.scale();
  const std::int64_t planes = n * shape.channels;
  const std::int64_t in_plane = static_cast<std::int64_t>(h_in) * w_in;
  const std::int64_t out_plane = static_cast<std::int64_t>(oh) * ow;
  for (std::int64_t pl = 0; pl < planes; ++pl) {
    float* dst = grad_in + pl * in_plane;
    const float* src = grad_out + pl * out_plane;
    for (int h = 0; h < h_in; ++h)
      for (int x = 0; x < w_in; ++x) {
        // The windows py with py*s <= h < py*s + window_h (and likewise for px).
        const int lo_y = h - shape.window_h + 1, lo_x = x - shape.window_w + 1;
        const int py0 = lo_y <= 0 ? 0 : (lo_y + s - 1) / s;
        const int px0 = lo_x <= 0 ? 0 : (lo_x + s - 1) / s;
        const int py1 = std::min(oh - 1, h / s);
        const int px1 = std::min(ow - 1, x / s);
        float sum = 0.0f;
        for (int py = py0; py <= py1; ++py)
          for (int px = px0; px <= px1; ++px) sum += src[py * ow + px];
        dst[h * w_in + x] = sum * scale;  // every window has the same scale: one product, no contraction
      }
  }
}

// ---- the CPU op

namespace {

class AvgPoolOp final : public CpuOp {
 public:
  AvgPoolOp(const Op& op, const Network& network) : CpuOp(op, network) {}

  void forward(const CpuForward& f) override { avgpool_forward(f.out, f.in, f.mb, layer().avg_pool); }

  float* backward(const CpuBackward& t) override {
    avgpool_backward(t.grad_in, t.grad_out, t.mb, layer().avg_pool);
    return t.grad_in;
  }
};

}  // namespace

std::unique_ptr<CpuOp> make_cpu_avgpool_op(const Op& op, const Network& network) {
  return std::make_unique<AvgPoolOp>(op, network);
}

}  // namespace cnn
