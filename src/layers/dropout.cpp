// The dropout layer on the host: its token dropout:<P> (the registry entry dropout_layer, layers.def),
// inverted dropout as plain loops, and its CPU op. Twin of kernels/layers/dropout.cu.
//
// In a training step each element is kept with probability 1 - P and scaled by 1 / (1 - P), or set to
// zero; the mask is a pure function of (seed, global step, sample, layer, element) (dropout_mask.hpp),
// drawn again in the backward rather than stored. In evaluation (CpuForward::training false: eval,
// predict, the epoch's test pass) the layer is the identity.
#include "cnn/layer_registry.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cnn/dropout_mask.hpp"
#include "cnn/layer_ops.hpp"
#include "cpu/cpu_op.hpp"

namespace cnn {

// ---- the registry entry

namespace {

// A plain decimal: digits with an optional fraction ("0.5", ".25", "0"), nothing else (no sign, exponent,
// hex or nan), so that every accepted text is one the canonical spec can print back.
bool read_decimal(const std::string& text, std::size_t pos, double& value) {
  std::size_t i = pos, digits = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i, ++digits;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i, ++digits;
  }
  if (digits == 0 || i != text.size() || i - pos > 32) return false;
  value = std::strtod(text.c_str() + pos, nullptr);
  return true;
}

std::string parse_dropout(const std::string& text, std::size_t pos, LayerToken& t) {
  if (pos >= text.size() || text[pos] != ':') return "dropout needs its drop probability (dropout:<P>, 0 <= P < 1)";
  if (!read_decimal(text, pos + 1, t.rate)) return "the drop probability must be a number in [0, 1) (dropout:<P>)";
  if (t.rate >= 1.0) return "the drop probability must be below 1 (P = 1 would drop everything)";
  return "";
}

std::string resolve_dropout(const LayerToken& t, Layer& layer) {
  layer.dropout = t.rate;
  layer.out = layer.in;
  return "";
}

// The shortest text that reads back as the same P ("0.5", not "0.50000000000000000").
std::string canonical_dropout(const Layer& layer) {
  char text[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, layer.dropout);
    if (std::strtod(text, nullptr) == layer.dropout) break;
  }
  return std::string("dropout:") + text;
}

}  // namespace

const LayerDef dropout_layer = {LayerKind::kDropout, false, "dropout", "dropout:<P>", "dropout", parse_dropout,
                                LayerInput::kAny, resolve_dropout, canonical_dropout, nullptr, false, nullptr, nullptr};

// ---- the math

void dropout_forward(float* out, const float* in, std::int64_t n, std::int64_t size, const DropoutDraw& draw,
                     const MaskOrigin& origin) {
  for (std::int64_t s = 0; s < n; ++s) {
    const auto sample = static_cast<std::uint64_t>(origin.first_sample + s);
    const float* src = in + s * size;
    float* dst = out + s * size;
    for (std::int64_t e = 0; e < size; ++e)
      dst[e] = src[e] * dropout_factor(draw, origin.step_key, sample, static_cast<std::uint64_t>(e));
  }
}

void dropout_backward(float* grad_in, const float* grad_out, std::int64_t n, std::int64_t size,
                      const DropoutDraw& draw, const MaskOrigin& origin) {
  dropout_forward(grad_in, grad_out, n, size, draw, origin);  // the same factor per element
}

// ---- the CPU op

namespace {

class DropoutOp final : public CpuOp {
 public:
  DropoutOp(const Op& op, const Network& network)
      : CpuOp(op, network), draw_(dropout_draw(layer().dropout, layer().token)) {
    has_own_data_ = true;  // where each micro-batch's samples stand, for its backward
    origins_.resize(1);
  }

  void size_slots(std::int64_t slots) override { origins_.assign(static_cast<std::size_t>(slots), MaskOrigin{}); }

  void forward(const CpuForward& f) override {
    if (!f.training) {
      std::memcpy(f.out, f.in, sizeof(float) * static_cast<std::size_t>(f.mb * out_size()));
      return;
    }
    origin(f.slot) = f.origin;
    dropout_forward(f.out, f.in, f.mb, out_size(), draw_, f.origin);
  }

  // In place: the factors are drawn again from the micro-batch's origin.
  float* backward(const CpuBackward& t) override {
    dropout_backward(t.grad_out, t.grad_out, t.mb, out_size(), draw_, origin(t.slot));
    return t.grad_out;
  }

 private:
  MaskOrigin& origin(std::int64_t slot) {
    return origins_[static_cast<std::size_t>(keeps_own_data() ? slot : 0)];
  }

  const DropoutDraw draw_;
  std::vector<MaskOrigin> origins_;  // per kept slot
};

}  // namespace

std::unique_ptr<CpuOp> make_cpu_dropout_op(const Op& op, const Network& network) {
  return std::make_unique<DropoutOp>(op, network);
}

}  // namespace cnn
