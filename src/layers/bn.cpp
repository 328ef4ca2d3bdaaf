// The batch-norm layer on the host: its token `bn` (the registry entry bn_layer, layers.def), the
// math as plain loops, and its CPU op. Twin of kernels/layers/bn.cu.
//
// Per channel c (per feature after fc, whose shape is {features, 1, 1}), over the samples and the
// H x W positions of the training step's batch (the rank's whole slice, never a thread's micro-batch:
// SliceSums; and the global batch unless --bn-local, cpu_backend.cpp):
//   y = gamma * (x - mean) / sqrt(var + eps) + beta,   var the biased variance (as PyTorch)
// gamma (<name>.weight, starts at 1) and beta (<name>.bias, starts at 0) are parameters; the running
// mean and variance are state (Network::state_count): each training forward moves them by momentum
// 0.1 towards the batch's mean and unbiased variance. Evaluation (eval, predict, the epoch's test
// pass) normalises with the running statistics instead. Statistics are in double, parameters and
// activations fp32 whatever --precision says.
#include "cnn/layer_registry.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cnn/layer_ops.hpp"
#include "cpu/cpu_op.hpp"

namespace cnn {

// ---- the registry entry

namespace {

// `bn` alone: the statistics, momentum and eps are fixed (as PyTorch's defaults).
std::string parse_bn(const std::string& text, std::size_t pos, LayerToken&) {
  return pos == text.size() ? "" : "bn takes no argument (bn)";
}

std::string resolve_bn(const LayerToken&, Layer& layer) {
  layer.out = layer.in;
  return "";
}

std::string canonical_bn(const Layer&) { return "bn"; }

LayerParams bn_params(const Layer& layer) {
  LayerParams p;
  p.weight_shape = {layer.in.channels};
  p.biases = layer.in.channels;
  p.unit_scale = true;
  p.state = 2 * static_cast<std::int64_t>(layer.in.channels);
  return p;
}

double bn_macs(const Layer& layer) { return 2.0 * static_cast<double>(layer.in.size()); }

}  // namespace

const LayerDef bn_layer = {LayerKind::kBatchNorm, false, "bn", "bn", "bn", parse_bn, LayerInput::kAny,
                           resolve_bn, canonical_bn, "bn", false, bn_params, bn_macs};

// ---- the math (bn_* in layer_ops.hpp)

void bn_channel_sums(double* sums, const float* x, std::int64_t n, std::int64_t channels, std::int64_t spatial) {
  for (std::int64_t c = 0; c < 2 * channels; ++c) sums[c] = 0.0;
  for (std::int64_t s = 0; s < n; ++s)
    for (std::int64_t c = 0; c < channels; ++c) {
      const float* v = x + (s * channels + c) * spatial;
      double sum = 0.0, squares = 0.0;
      for (std::int64_t i = 0; i < spatial; ++i) {
        sum += v[i];
        squares += static_cast<double>(v[i]) * v[i];
      }
      sums[c] += sum;
      sums[channels + c] += squares;
    }
}

void bn_statistics(float* mean, float* inv_std, const double* sums, double count, std::int64_t channels,
                   float* running, float momentum) {
  for (std::int64_t c = 0; c < channels; ++c) {
    const double m = sums[c] / count;
    const double var = std::max(0.0, sums[channels + c] / count - m * m);
    mean[c] = static_cast<float>(m);
    inv_std[c] = static_cast<float>(1.0 / std::sqrt(var + kBatchNormEps));
    if (running != nullptr) {
      const double unbiased = count > 1.0 ? var * count / (count - 1.0) : var;
      running[c] = static_cast<float>((1.0 - momentum) * running[c] + momentum * m);
      running[channels + c] = static_cast<float>((1.0 - momentum) * running[channels + c] + momentum * unbiased);
    }
  }
}

void bn_running_statistics(float* mean, float* inv_std, const float* running, std::int64_t channels) {
  for (std::int64_t c = 0; c < channels; ++c) {
    mean[c] = running[c];
    inv_std[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(running[channels + c]) + kBatchNormEps));
  }
}

void bn_normalize(float* y, const float* x, const float* mean, const float* inv_std, const float* gamma,
                  const float* beta, std::int64_t n, std::int64_t channels, std::int64_t spatial) {
  for (std::int64_t s = 0; s < n; ++s)
    for (std::int64_t c = 0; c < channels; ++c) {
      const float scale = gamma[c] * inv_std[c], shift = beta[c] - mean[c] * scale;
      const float* v = x + (s * channels + c) * spatial;
      float* out = y + (s * channels + c) * spatial;
      for (std::int64_t i = 0; i < spatial; ++i) out[i] = v[i] * scale + shift;
    }
}

void bn_gradient_sums(double* sums, const float* grad_y, const float* x, const float* mean, const float* inv_std,
                      std::int64_t n, std::int64_t channels, std::int64_t spatial) {
  for (std::int64_t c = 0; c < 2 * channels; ++c) sums[c] = 0.0;
  for (std::int64_t s = 0; s < n; ++s)
    for (std::int64_t c = 0; c < channels; ++c) {
      const float* g = grad_y + (s * channels + c) * spatial;
      const float* v = x + (s * channels + c) * spatial;
      double dy = 0.0, dy_xhat = 0.0;
      for (std::int64_t i = 0; i < spatial; ++i) {
        dy += g[i];
        dy_xhat += static_cast<double>(g[i]) * ((v[i] - mean[c]) * inv_std[c]);
      }
      sums[c] += dy;
      sums[channels + c] += dy_xhat;
    }
}

void bn_input_gradient(float* grad_x, const float* grad_y, const float* x, const float* mean, const float* inv_std,
                       const float* gamma, const double* sums, double count, std::int64_t n, std::int64_t channels,
                       std::int64_t spatial) {
  for (std::int64_t c = 0; c < channels; ++c) {
    const float mean_dy = static_cast<float>(sums[c] / count);
    const float mean_dy_xhat = static_cast<float>(sums[channels + c] / count);
    const float scale = gamma[c] * inv_std[c];
    for (std::int64_t s = 0; s < n; ++s) {
      const float* g = grad_y + (s * channels + c) * spatial;
      const float* v = x + (s * channels + c) * spatial;
      float* out = grad_x + (s * channels + c) * spatial;
      for (std::int64_t i = 0; i < spatial; ++i)
        out[i] = scale * (g[i] - mean_dy - (v[i] - mean[c]) * inv_std[c] * mean_dy_xhat);
    }
  }
}

// ---- the CPU op

namespace {

class BatchNormOp final : public CpuOp {
 public:
  BatchNormOp(const Op& op, const Network& network)
      : CpuOp(op, network),
        channels_(layer().in.channels),
        spatial_(static_cast<std::int64_t>(layer().in.height) * layer().in.width),
        sums_(static_cast<std::size_t>(2 * channels_ + 1)) {
    has_own_data_ = true;  // the micro-batch's mean and 1/std, for its backward
    size_slots(1);
  }

  void size_slots(std::int64_t slots) override {
    const std::int64_t kept = keeps_own_data() ? slots : 1;
    statistics_.assign(static_cast<std::size_t>(kept * 2 * channels_), 0.0f);
    counts_.assign(static_cast<std::size_t>(kept), 0.0);
  }

  void forward(const CpuForward& f) override {
    const float* gamma = f.params + layer().weight_offset;
    const float* beta = f.params + layer().bias_offset;
    float* running = f.state + layer().state_offset;
    float* mean = statistics(f.slot);
    float* inv_std = mean + channels_;
    if (!f.training) {
      bn_running_statistics(mean, inv_std, running, channels_);
    } else {
      // The slice's sums (and the other ranks' with global statistics), then one update of the
      // running statistics per step, by the first thread.
      bn_channel_sums(sums_.data(), f.in, f.mb, channels_, spatial_);
      sums_.back() = static_cast<double>(f.mb * spatial_);
      f.slice.sums->sum(f.slice.participant, sums_.data(), sums_.size());
      counts_[static_cast<std::size_t>(keeps_own_data() ? f.slot : 0)] = sums_.back();
      bn_statistics(mean, inv_std, sums_.data(), sums_.back(), channels_, f.slice.participant == 0 ? running : nullptr,
                    kBatchNormMomentum);
    }
    bn_normalize(f.out, f.in, mean, inv_std, gamma, beta, f.mb, channels_, spatial_);
  }

  float* backward(const CpuBackward& t) override {
    const float* gamma = t.params + layer().weight_offset;
    const float* mean = statistics(t.slot);
    const float* inv_std = mean + channels_;
    // This thread's part of d gamma and d beta; the threads' and ranks' parts are summed with every
    // other gradient.
    bn_gradient_sums(sums_.data(), t.grad_out, t.in, mean, inv_std, t.mb, channels_, spatial_);
    float* grad_gamma = t.grads + layer().weight_offset;
    float* grad_beta = t.grads + layer().bias_offset;
    for (std::int64_t c = 0; c < channels_; ++c) {
      grad_beta[c] += static_cast<float>(sums_[static_cast<std::size_t>(c)]);
      grad_gamma[c] += static_cast<float>(sums_[static_cast<std::size_t>(channels_ + c)]);
    }
    if (t.grad_in == nullptr) return nullptr;  // the same on every thread and rank: no one asks for the sums
    sums_.back() = 0.0;
    t.slice.sums->sum(t.slice.participant, sums_.data(), sums_.size());
    bn_input_gradient(t.grad_in, t.grad_out, t.in, mean, inv_std, gamma, sums_.data(),
                      counts_[static_cast<std::size_t>(keeps_own_data() ? t.slot : 0)], t.mb, channels_, spatial_);
    return t.grad_in;
  }

 private:
  float* statistics(std::int64_t slot) {
    return statistics_.data() + (keeps_own_data() ? slot : 0) * 2 * channels_;
  }

  const std::int64_t channels_, spatial_;
  std::vector<double> sums_;        // per channel: two sums, then the sample-position count
  std::vector<float> statistics_;   // per kept slot: mean [C], then 1 / sqrt(var + eps) [C]
  std::vector<double> counts_;      // per kept slot: the values per channel the statistics cover
};

}  // namespace

std::unique_ptr<CpuOp> make_cpu_bn_op(const Op& op, const Network& network) {
  return std::make_unique<BatchNormOp>(op, network);
}

}  // namespace cnn
