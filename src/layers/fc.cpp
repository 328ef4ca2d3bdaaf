// The fc layer on the host: its token fc:<N>, shape and parameters (the registry entry fc_layer,
// layers.def), the fully connected products, and its CPU op. The feature dimension is long (169*d)
// and the output short (10), so every loop runs along the features in SIMD vectors (ops/simd.hpp).
// Twin of kernels/layers/fc.cu.
#include "cnn/layer_registry.hpp"

#include <algorithm>
#include <string>
#include <type_traits>

#include "cnn/ops.hpp"
#include "cpu/cpu_op.hpp"
#include "ops/simd.hpp"

namespace cnn {

// ---- the registry entry

namespace {

std::string parse_fc(const std::string& text, std::size_t pos, LayerToken& t) {
  if (!read_int(text, pos, t.fc_out) || pos != text.size()) return "fc:<N> needs a whole number N";
  if (t.fc_out < 1) return "fc needs at least 1 output";
  return "";
}

std::string resolve_fc(const LayerToken& t, Layer& layer) {
  layer.fc_out = t.fc_out;
  if (t.fc_out > kMaxLayerExtent * 16) return "too many outputs";
  layer.out = {t.fc_out, 1, 1};
  return "";
}

std::string canonical_fc(const Layer& layer) { return "fc:" + std::to_string(layer.fc_out); }

LayerParams params_fc(const Layer& layer) {
  const std::int64_t in_features = layer.in.size();
  return {{layer.fc_out, in_features}, layer.fc_out, in_features};
}

double macs_fc(const Layer& layer) { return static_cast<double>(layer.in.size()) * layer.fc_out; }

}  // namespace

const LayerDef fc_layer = {LayerKind::kFc, false, "fc", "fc:<N>", "fc:", parse_fc, LayerInput::kFlat, resolve_fc,
                            canonical_fc, "fc", false, params_fc, macs_fc};

// ---- the math
//
// Register tiles: the weights are the large operand (10 x 169d floats for the seed, read from L2), so
// the forward and the input gradient reuse each weight vector for several samples, and the weight
// gradient keeps a block of output rows' sums in registers while every sample's features stream by.
// Sums over the features run lane-wise in vector registers, then across the lanes.

namespace {

using simd::Vec;

// Samples per forward / input-gradient tile: 4 x 5 accumulators fit the 32 AVX-512 registers, 2 x 5
// the 16 of AVX2.
constexpr int kTileSamples = simd::kLanes == 16 ? 4 : 2;
constexpr int kTileOutputs = 5;
// Output rows per weight-gradient block (x 2 feature vectors: 20 accumulators, 12 with AVX2).
constexpr int kGradOutputs = simd::kLanes == 16 ? 10 : 6;
// Samples x outputs per input-gradient tile: their factors stay in registers (20, 10 with AVX2).
constexpr int kInputGradSamples = simd::kLanes == 16 ? 2 : 1;
constexpr int kInputGradOutputs = 10;

std::int64_t whole_vectors(std::int64_t features) { return features / simd::kLanes * simd::kLanes; }

// Features per block: the forward (and the input gradient, with its own blocks below) runs every
// sample of the call over one block of the weights (10 x 4096 floats, 160 kB: it stays in L2) before
// the next, so that a weight matrix larger than L2 (the seed at d 256: 1.7 MB) is read from memory
// once per call, not once per tile. (The forward's sums run block by block: the block sets its bits.)
constexpr std::int64_t kFeatureBlock = 4096;
// The input gradient's blocks: its sums run over the outputs, not the features, so the block sets
// only how often the weights are read, not the bits. 10 x 12288 floats (480 kB) still sit in L2
// (1 MB on this machine's cores); the seed at d 64 (10816 features) is one block. Measured against
// 4096 (/tmp harness): fc backward at d 64 2.7 -> 2.5 us per image; at d 256 no change.
constexpr std::int64_t kInputGradFeatureBlock = 12288;

// out[s][o] (+)= in[s] . weight[o] over features [begin, end), for samples s0.. and outputs o0.. of
// one tile; the first block starts from the bias.
template <int kSamples, int kOutputs>
void forward_tile(float* out, const float* in, const float* weight, const float* bias, std::int64_t in_features,
                  std::int64_t out_features, std::int64_t s0, std::int64_t o0, std::int64_t begin, std::int64_t end) {
  Vec acc[kSamples][kOutputs];
  for (auto& row : acc)
    for (Vec& a : row) a = simd::splat(0.0f);
  const std::int64_t whole = begin + whole_vectors(end - begin);
  for (std::int64_t i = begin; i < whole; i += simd::kLanes) {
    Vec x[kSamples];
    for (int s = 0; s < kSamples; ++s) x[s] = simd::load(in + (s0 + s) * in_features + i);
    for (int o = 0; o < kOutputs; ++o) {
      Vec w = simd::load(weight + (o0 + o) * in_features + i);
      simd::in_register(w);  // one load for kSamples FMAs (folded, it was one load each)
      for (int s = 0; s < kSamples; ++s) acc[s][o] += x[s] * w;
    }
  }
  for (int s = 0; s < kSamples; ++s)
    for (int o = 0; o < kOutputs; ++o) {
      float sum = simd::sum(acc[s][o]);
      const float* x = in + (s0 + s) * in_features;
      const float* w = weight + (o0 + o) * in_features;
      for (std::int64_t i = whole; i < end; ++i) sum += x[i] * w[i];
      float& y = out[(s0 + s) * out_features + o0 + o];
      y = (begin == 0 ? bias[o0 + o] : y) + sum;
    }
}

// Calls f(std::integral_constant<int, count>) for a count in 1 .. kMax known only at run time (the
// last rows of a product, fewer than a whole tile); nothing for 0.
template <int kMax, typename F>
void with_count(std::int64_t count, F&& f) {
  if constexpr (kMax > 0) {
    if (count == kMax) return f(std::integral_constant<int, kMax>{});
    with_count<kMax - 1>(count, f);
  }
}

// Every output of kSamples samples from s0, kTileOutputs at a time.
template <int kSamples>
void forward_samples(float* out, const float* in, const float* weight, const float* bias, std::int64_t in_features,
                     std::int64_t out_features, std::int64_t s0, std::int64_t begin, std::int64_t end) {
  std::int64_t o = 0;
  const auto tile = [&](auto outputs) {
    forward_tile<kSamples, decltype(outputs)::value>(out, in, weight, bias, in_features, out_features, s0, o, begin, end);
  };
  for (; o + kTileOutputs <= out_features; o += kTileOutputs) tile(std::integral_constant<int, kTileOutputs>{});
  with_count<kTileOutputs - 1>(out_features - o, tile);
}

// grad_in[s] (+)= sum over outputs o0 .. o0 + kOutputs of grad_out[s][o] * weight[o], for kSamples
// samples from s0 over features [begin, end); the first group of outputs starts from zero. The
// kSamples x kOutputs factors are broadcast once into registers for the whole feature range (as
// memory operands they were a load per FMA, and loads set the pace here).
template <int kSamples, int kOutputs>
void input_grad_tile(float* grad_in, const float* grad_out, const float* weight, std::int64_t in_features,
                     std::int64_t out_features, std::int64_t s0, std::int64_t o0, std::int64_t begin,
                     std::int64_t end) {
  Vec factor[kSamples][kOutputs];
  for (int s = 0; s < kSamples; ++s)
    for (int o = 0; o < kOutputs; ++o) factor[s][o] = simd::splat(grad_out[(s0 + s) * out_features + o0 + o]);
  const std::int64_t whole = begin + whole_vectors(end - begin);
  for (std::int64_t i = begin; i < whole; i += simd::kLanes) {
    Vec acc[kSamples];
    for (int s = 0; s < kSamples; ++s)
      acc[s] = o0 == 0 ? simd::splat(0.0f) : simd::load(grad_in + (s0 + s) * in_features + i);
    for (int o = 0; o < kOutputs; ++o) {
      Vec w = simd::load(weight + (o0 + o) * in_features + i);
      simd::in_register(w);
      for (int s = 0; s < kSamples; ++s) acc[s] += factor[s][o] * w;
    }
    for (int s = 0; s < kSamples; ++s) simd::store(grad_in + (s0 + s) * in_features + i, acc[s]);
  }
  for (int s = 0; s < kSamples; ++s)
    for (std::int64_t i = whole; i < end; ++i) {
      float sum = o0 == 0 ? 0.0f : grad_in[(s0 + s) * in_features + i];
      for (int o = 0; o < kOutputs; ++o) sum += grad_out[(s0 + s) * out_features + o0 + o] * weight[(o0 + o) * in_features + i];
      grad_in[(s0 + s) * in_features + i] = sum;
    }
}

// grad_in[s] = sum over o of grad_out[s][o] * weight[o], for kSamples samples from s0, the outputs
// kInputGradOutputs at a time (the sums in the order of o either way).
template <int kSamples>
void input_grad_samples(float* grad_in, const float* grad_out, const float* weight, std::int64_t in_features,
                        std::int64_t out_features, std::int64_t s0, std::int64_t begin, std::int64_t end) {
  std::int64_t o = 0;
  const auto tile = [&](auto outputs) {
    input_grad_tile<kSamples, decltype(outputs)::value>(grad_in, grad_out, weight, in_features, out_features, s0, o,
                                                        begin, end);
  };
  for (; o + kInputGradOutputs <= out_features; o += kInputGradOutputs)
    tile(std::integral_constant<int, kInputGradOutputs>{});
  with_count<kInputGradOutputs - 1>(out_features - o, tile);
}

// grad_weight[o] += sum over s of grad_out[s][o] * in[s], for kOutputs rows from o0, kVectors feature
// vectors at a time over [begin, end) (whole vectors): each factor broadcast once per sample for
// kVectors FMAs.
template <int kOutputs, int kVectors>
void weight_grad_vectors(float* grad_weight, const float* grad_out, const float* in, std::int64_t n,
                         std::int64_t in_features, std::int64_t out_features, std::int64_t o0, std::int64_t begin,
                         std::int64_t end) {
  for (std::int64_t i = begin; i + kVectors * simd::kLanes <= end; i += kVectors * simd::kLanes) {
    Vec acc[kOutputs][kVectors];
    for (auto& row : acc)
      for (Vec& a : row) a = simd::splat(0.0f);
    for (std::int64_t s = 0; s < n; ++s) {
      Vec x[kVectors];
      for (int v = 0; v < kVectors; ++v) x[v] = simd::load(in + s * in_features + i + v * simd::kLanes);
      for (int o = 0; o < kOutputs; ++o) {
        Vec factor = simd::splat(grad_out[s * out_features + o0 + o]);
        simd::in_register(factor);
        for (int v = 0; v < kVectors; ++v) acc[o][v] += factor * x[v];
      }
    }
    for (int o = 0; o < kOutputs; ++o)
      for (int v = 0; v < kVectors; ++v) {
        float* gw = grad_weight + (o0 + o) * in_features + i + v * simd::kLanes;
        simd::store(gw, simd::load(gw) + acc[o][v]);
      }
  }
}

// grad_weight[o] += sum over s of grad_out[s][o] * in[s], for kOutputs rows from o0.
template <int kOutputs>
void weight_grad_rows(float* grad_weight, const float* grad_out, const float* in, std::int64_t n,
                      std::int64_t in_features, std::int64_t out_features, std::int64_t o0) {
  const std::int64_t whole = whole_vectors(in_features);
  const std::int64_t pairs = whole / (2 * simd::kLanes) * (2 * simd::kLanes);
  weight_grad_vectors<kOutputs, 2>(grad_weight, grad_out, in, n, in_features, out_features, o0, 0, pairs);
  weight_grad_vectors<kOutputs, 1>(grad_weight, grad_out, in, n, in_features, out_features, o0, pairs, whole);
  for (int o = 0; o < kOutputs; ++o)
    for (std::int64_t i = whole; i < in_features; ++i) {
      float sum = 0.0f;
      for (std::int64_t s = 0; s < n; ++s) sum += grad_out[s * out_features + o0 + o] * in[s * in_features + i];
      grad_weight[(o0 + o) * in_features + i] += sum;
    }
}

}  // namespace

void fc_forward(float* out, const float* in, const float* weight, const float* bias, std::int64_t n,
                std::int64_t in_features, std::int64_t out_features) {
  // One block of features at a time (at least one: out gets the bias also with no features).
  for (std::int64_t begin = 0; begin == 0 || begin < in_features; begin += kFeatureBlock) {
    const std::int64_t end = std::min(in_features, begin + kFeatureBlock);
    std::int64_t s = 0;
    for (; s + kTileSamples <= n; s += kTileSamples)
      forward_samples<kTileSamples>(out, in, weight, bias, in_features, out_features, s, begin, end);
    for (; s < n; ++s) forward_samples<1>(out, in, weight, bias, in_features, out_features, s, begin, end);
  }
}

void fc_backward(float* grad_in, float* grad_weight, float* grad_bias, const float* grad_out, const float* in,
                 const float* weight, std::int64_t n, std::int64_t in_features, std::int64_t out_features) {
  if (grad_in != nullptr)
    for (std::int64_t begin = 0; begin < in_features; begin += kInputGradFeatureBlock) {
      const std::int64_t end = std::min(in_features, begin + kInputGradFeatureBlock);
      std::int64_t s = 0;
      for (; s + kInputGradSamples <= n; s += kInputGradSamples)
        input_grad_samples<kInputGradSamples>(grad_in, grad_out, weight, in_features, out_features, s, begin, end);
      for (; s < n; ++s) input_grad_samples<1>(grad_in, grad_out, weight, in_features, out_features, s, begin, end);
    }
  for (std::int64_t o = 0; o < out_features; ++o) {
    float bias_sum = 0.0f;
    for (std::int64_t s = 0; s < n; ++s) bias_sum += grad_out[s * out_features + o];
    grad_bias[o] += bias_sum;
  }
  std::int64_t o = 0;
  for (; o + kGradOutputs <= out_features; o += kGradOutputs)
    weight_grad_rows<kGradOutputs>(grad_weight, grad_out, in, n, in_features, out_features, o);
  with_count<kGradOutputs - 1>(out_features - o, [&](auto rows) {
    weight_grad_rows<decltype(rows)::value>(grad_weight, grad_out, in, n, in_features, out_features, o);
  });
}

// ---- the CPU op

namespace {

class FcOp final : public CpuOp {
 public:
  FcOp(const Op& op, const Network& network) : CpuOp(op, network) {}

  void forward(const CpuForward& f) override {
    const Layer& l = layer();
    fc_forward(f.out, f.in, f.params + l.weight_offset, f.params + l.bias_offset, f.mb, in_size(), l.fc_out);
  }

  float* backward(const CpuBackward& t) override {
    const Layer& l = layer();
    fc_backward(t.grad_in, t.grads + l.weight_offset, t.grads + l.bias_offset, t.grad_out, t.in,
                t.params + l.weight_offset, t.mb, in_size(), l.fc_out);
    return t.grad_in;
  }
};

}  // namespace

std::unique_ptr<CpuOp> make_cpu_fc_op(const Op& op, const Network& network) {
  return std::make_unique<FcOp>(op, network);
}

}  // namespace cnn
