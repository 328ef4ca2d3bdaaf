// The conv layer on the host: its token conv<K>x<K>:<F>[/s<S>][/p<P>], shape and parameters (the
// registry entry conv_layer, layers.def), the convolution as im2col + one matrix product per chunk of
// samples (gemm.hpp, single-threaded: the backends already give each core its own share of samples;
// scratch matrices are per calling thread), and its CPU op. Twin of kernels/layers/conv.cu.
#include "cnn/layer_registry.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cnn/layer_ops.hpp"
#include "cpu/cpu_op.hpp"
#include "ops/gemm.hpp"
#include "ops/im2col.hpp"
#include "ops/simd.hpp"

namespace cnn {

// ---- the registry entry

namespace {

std::string parse_conv(const std::string& text, std::size_t pos, LayerToken& t) {
  int k2 = 0;
  if (!read_int(text, pos, t.kernel) || pos >= text.size() || text[pos] != 'x') return grammar_text();
  ++pos;
  if (!read_int(text, pos, k2) || pos >= text.size() || text[pos] != ':') return grammar_text();
  ++pos;
  if (!read_int(text, pos, t.filters)) return "conv needs a filter count after ':'";
  const std::string why = read_suffixes(text, pos, true, t);
  if (!why.empty()) return why;
  if (t.kernel != k2) return "only square kernels are supported (conv<K>x<K>)";
  if (t.kernel < 1) return "the kernel size must be at least 1";
  if (t.filters < 1) return "the filter count must be at least 1";
  if (t.stride < 1) return "the stride must be at least 1";
  if (t.pad >= t.kernel) return "the padding must be smaller than the kernel";
  return "";
}

std::string resolve_conv(const LayerToken& t, Layer& layer) {
  ConvShape& c = layer.conv;
  c.channels = layer.in.channels;
  c.height = layer.in.height;
  c.width = layer.in.width;
  c.filters = t.filters;
  c.kernel = t.kernel;
  c.stride = t.stride;
  c.pad = t.pad;
  if (c.kernel > c.height + 2 * c.pad || c.kernel > c.width + 2 * c.pad || c.kernel > kMaxLayerExtent ||
      c.filters > kMaxLayerExtent)
    return "a " + std::to_string(c.kernel) + "x" + std::to_string(c.kernel) + " kernel does not fit its " +
           shape_text(layer.in) + " input (padding " + std::to_string(c.pad) + ")";
  layer.out = {c.filters, c.out_h(), c.out_w()};
  return "";
}

std::string canonical_conv(const Layer& layer) {
  const ConvShape& c = layer.conv;
  std::string text =
      "conv" + std::to_string(c.kernel) + "x" + std::to_string(c.kernel) + ":" + std::to_string(c.filters);
  if (c.stride != 1) text += "/s" + std::to_string(c.stride);
  if (c.pad != 0) text += "/p" + std::to_string(c.pad);
  return text;
}

LayerParams params_conv(const Layer& layer) {
  const ConvShape& c = layer.conv;
  const std::int64_t fan_in = static_cast<std::int64_t>(c.channels) * c.kernel * c.kernel;
  return {{c.filters, c.channels, c.kernel, c.kernel}, c.filters, fan_in};
}

double macs_conv(const Layer& layer) {
  return static_cast<double>(layer.conv.out_size()) * layer.conv.channels * layer.conv.kernel * layer.conv.kernel;
}

}  // namespace

const LayerDef conv_layer = {LayerKind::kConv, false, "conv", "conv<K>x<K>:<F>[/s<S>][/p<P>]", "conv", parse_conv,
                              LayerInput::kSpatial, resolve_conv, canonical_conv, "conv", true, params_conv, macs_conv};

// ---- the math

namespace {

// Floats of the im2col matrix per chunk: samples are batched into one sgemm (wider matrices run
// faster) until the matrix would leave the L2 cache.
constexpr std::int64_t kColumnBudget = std::int64_t{1} << 18;

struct ConvScratch {
  std::vector<float> col;    // [C*K*K, chunk*OH*OW]
  std::vector<float> tmp;    // [F, chunk*OH*OW] (the input gradient's B)
  std::vector<float> tmp_t;  // [chunk*OH*OW, F], tmp transposed (the weight gradient's B)
  std::vector<float> gwt;    // [C*K*K, F], a chunk's weight gradient, transposed
  std::vector<float> dcol;   // [C*K*K, chunk*OH*OW]
  std::vector<float> wt;     // [C*K*K, F], the weight transposed
};

ConvScratch& scratch() {
  thread_local ConvScratch s;
  return s;
}

// Grows a scratch matrix, never shrinks it: the forward needs all of a chunk's column rows, the
// backward a channel group's, and a vector grown back after a shrink zero-fills what it regains.
void reserve_floats(std::vector<float>& v, std::int64_t count) {
  if (static_cast<std::int64_t>(v.size()) < count) v.resize(static_cast<std::size_t>(count));
}

// Floats of the backward's column rows per channel group (see conv2d_backward): a quarter of L2.
constexpr std::int64_t kGroupBudget = std::int64_t{1} << 15;

int channel_group(std::int64_t floats_per_channel, int channels) {
  return static_cast<int>(std::max<std::int64_t>(
      1, std::min<std::int64_t>(channels, kGroupBudget / std::max<std::int64_t>(1, floats_per_channel))));
}

std::int64_t chunk_samples(std::int64_t n, const ConvShape& shape) {
  const std::int64_t per_sample =
      static_cast<std::int64_t>(shape.channels) * shape.kernel * shape.kernel * shape.out_h() * shape.out_w();
  return std::max<std::int64_t>(1, std::min<std::int64_t>(n, kColumnBudget / std::max<std::int64_t>(1, per_sample)));
}

}  // namespace

void conv2d_forward(float* out, const float* in, const float* weight, const float* bias, std::int64_t n,
                    const ConvShape& shape) {
  const int filters = shape.filters;
  const std::int64_t ckk = static_cast<std::int64_t>(shape.channels) * shape.kernel * shape.kernel;
  const std::int64_t ohw = static_cast<std::int64_t>(shape.out_h()) * shape.out_w();
  const std::int64_t chunk_max = chunk_samples(n, shape);
  ConvScratch& sc = scratch();
  reserve_floats(sc.col, ckk * chunk_max * ohw);
  reserve_floats(sc.tmp, filters * chunk_max * ohw);
  for (std::int64_t s0 = 0; s0 < n; s0 += chunk_max) {
    const std::int64_t chunk = std::min(chunk_max, n - s0);
    const std::int64_t columns = chunk * ohw;
    conv_columns::im2col(sc.col.data(), in + s0 * shape.in_size(), chunk, shape, 0, shape.channels);
    gemm::nn(sc.tmp.data(), weight, sc.col.data(), filters, columns, ckk, false);
    // [F, chunk, OHW] -> [chunk, F, OHW], adding the bias.
    for (std::int64_t s = 0; s < chunk; ++s)
      for (int f = 0; f < filters; ++f) {
        const float* src = sc.tmp.data() + f * columns + s * ohw;
        float* dst = out + ((s0 + s) * filters + f) * ohw;
        const float b = bias[f];
        for (std::int64_t p = 0; p < ohw; ++p) dst[p] = src[p] + b;
      }
  }
}

void conv2d_backward(float* grad_in, float* grad_weight, float* grad_bias, const float* grad_out, const float* in,
                     const float* weight, std::int64_t n, const ConvShape& shape) {
  const int filters = shape.filters;
  const std::int64_t ckk = static_cast<std::int64_t>(shape.channels) * shape.kernel * shape.kernel;
  const std::int64_t ohw = static_cast<std::int64_t>(shape.out_h()) * shape.out_w();
  const std::int64_t chunk_max = chunk_samples(n, shape);
  const std::int64_t kk = static_cast<std::int64_t>(shape.kernel) * shape.kernel;
  const int group = channel_group(kk * chunk_max * ohw, shape.channels);
  ConvScratch& sc = scratch();
  reserve_floats(sc.col, group * kk * chunk_max * ohw);
  reserve_floats(sc.tmp_t, filters * chunk_max * ohw);
  reserve_floats(sc.gwt, ckk * filters);
  if (grad_in != nullptr) {
    reserve_floats(sc.tmp, filters * chunk_max * ohw);
    reserve_floats(sc.dcol, group * kk * chunk_max * ohw);
    reserve_floats(sc.wt, ckk * filters);
    conv_columns::transpose(sc.wt.data(), filters, weight, ckk, filters, ckk, false);
  }
  for (std::int64_t s0 = 0; s0 < n; s0 += chunk_max) {
    const std::int64_t chunk = std::min(chunk_max, n - s0);
    const std::int64_t columns = chunk * ohw;
    // [chunk, F, OHW] -> [chunk, OHW, F] for the weight gradient, and [F, chunk, OHW] for the input
    // gradient's columns when there is one; the bias gradient on the way, sample by sample.
    for (std::int64_t s = 0; s < chunk; ++s) {
      const float* src = grad_out + (s0 + s) * filters * ohw;
      conv_columns::transpose(sc.tmp_t.data() + s * ohw * filters, filters, src, ohw, filters, ohw, false);
      for (int f = 0; f < filters; ++f) {
        const float* row = src + f * ohw;
        float sum = 0.0f;
        for (std::int64_t p = 0; p < ohw; ++p) sum += row[p];
        grad_bias[f] += sum;
        if (grad_in != nullptr) std::copy(row, row + ohw, sc.tmp.data() + f * columns + s * ohw);
      }
    }
    // Channel group by channel group, so that the group's column rows, written by im2col and read
    // by the weight gradient's product, and its dcol rows, written by the input gradient's product
    // and read by col2im, stay in L2 (the whole chunk's, 1 MB on the cifar preset's conv2, did
    // not). Each product's entries are the same sums as over the whole matrix: the same bits.
    for (int c0 = 0; c0 < shape.channels; c0 += group) {
      const int count = std::min(group, shape.channels - c0);
      const std::int64_t rows = count * kk;
      conv_columns::im2col(sc.col.data(), in + s0 * shape.in_size(), chunk, shape, c0, count);
      // gwt[CKK, F] = col[CKK, columns] x grad_out^T[columns, F], this group's rows: the product in
      // the GEMM's nn form, whose register tiles run at 83-87% of a core's peak on the cifar
      // preset's shapes, where the dot-product form (C += A x B^T, a horizontal sum and a scalar
      // tail per output) ran at 28-37% (tools/gemm_bench.cpp; docs/PERFORMANCE.md).
      gemm::nn(sc.gwt.data() + c0 * kk * filters, sc.col.data(), sc.tmp_t.data(), rows, filters, columns, false);
      if (grad_in == nullptr) continue;
      // dcol[CKK, columns] = weight[F, CKK]^T x grad_out[F, columns], this group's rows
      gemm::nn(sc.dcol.data(), sc.wt.data() + c0 * kk * filters, sc.tmp.data(), rows, columns, filters, false);
      conv_columns::col2im(grad_in + s0 * shape.in_size(), sc.dcol.data(), chunk, shape, c0, count);
    }
    conv_columns::transpose(grad_weight, ckk, sc.gwt.data(), filters, ckk, filters, true);
  }
}

// ---- the CPU op

namespace {

class ConvOp final : public CpuOp {
 public:
  ConvOp(const Op& op, const Network& network) : CpuOp(op, network) {}

  void forward(const CpuForward& f) override {
    const Layer& l = layer();
    conv2d_forward(f.out, f.in, f.params + l.weight_offset, f.params + l.bias_offset, f.mb, l.conv);
  }

  float* backward(const CpuBackward& t) override {
    const Layer& l = layer();
    conv2d_backward(t.grad_in, t.grads + l.weight_offset, t.grads + l.bias_offset, t.grad_out, t.in,
                    t.params + l.weight_offset, t.mb, l.conv);
    return t.grad_in;
  }
};

}  // namespace

std::unique_ptr<CpuOp> make_cpu_conv_op(const Op& op, const Network& network) {
  return std::make_unique<ConvOp>(op, network);
}

}  // namespace cnn
