// The maxpool layer on the host: its token maxpool<K>[/s<S>] and shape (the registry entry
// maxpool_layer, layers.def), max-pooling (2x2 windows as AVX-512 rows where they fit, plain loops
// otherwise), and its CPU op, which keeps each window's winner for its backward. Twin of kernels/layers/maxpool.cu.
#include "cnn/layer_registry.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "cnn/layer_ops.hpp"
#include "cpu/cpu_op.hpp"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

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

namespace {

// 2x2 windows moved by 2 over planes at most 32 wide (the cifar preset's pools, and the CNN
// shapes' usual one): one output row at a time, its windows across the lanes, the two input rows
// split into their even and odd columns by one two-source permute each. The window's four values
// are compared in the scalar loop's order with its strict >, so the winners (first maximum, NaN
// never wins) and the bits are the same. The scalar loop took 3% of the cifar preset's time.
#ifdef __AVX512F__
bool maxpool_2x2_rows(float* out, std::int32_t* argmax, const float* in, std::int64_t planes, const PoolShape& shape) {
  const int oh = shape.out_h(), ow = shape.out_w(), w = shape.width;
  if (shape.size != 2 || shape.stride != 2 || w > 32) return false;
  const std::int64_t in_plane = static_cast<std::int64_t>(shape.height) * w;
  const std::int64_t out_plane = static_cast<std::int64_t>(oh) * ow;
  const __mmask16 lo_mask = static_cast<__mmask16>(w >= 16 ? 0xffffu : (1u << w) - 1);
  const __mmask16 hi_mask = static_cast<__mmask16>(w <= 16 ? 0u : (1u << (w - 16)) - 1);
  const __mmask16 out_mask = static_cast<__mmask16>((1u << ow) - 1);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  auto split = [&](const float* row, __m512* e, __m512* o) {
    const __m512 lo = _mm512_maskz_loadu_ps(lo_mask, row), hi = _mm512_maskz_loadu_ps(hi_mask, row + 16);
    *e = _mm512_permutex2var_ps(lo, even, hi);
    *o = _mm512_permutex2var_ps(lo, odd, hi);
  };
  for (std::int64_t pl = 0; pl < planes; ++pl) {
    const float* src = in + pl * in_plane;
    for (int py = 0; py < oh; ++py) {
      const int y0 = 2 * py;
      __m512 r0e, r0o, r1e, r1o;
      split(src + static_cast<std::int64_t>(y0) * w, &r0e, &r0o);
      split(src + static_cast<std::int64_t>(y0 + 1) * w, &r1e, &r1o);
      __m512i index = _mm512_add_epi32(even, _mm512_set1_epi32(y0 * w));  // (y0, 2 px)
      __m512 best = r0e;
      __m512i best_index = index;
      auto challenge = [&](__m512 value, int offset) {
        const __mmask16 wins = _mm512_cmp_ps_mask(value, best, _CMP_GT_OQ);
        best = _mm512_mask_mov_ps(best, wins, value);
        best_index = _mm512_mask_mov_epi32(best_index, wins, _mm512_add_epi32(index, _mm512_set1_epi32(offset)));
      };
      challenge(r0o, 1);
      challenge(r1e, w);
      challenge(r1o, w + 1);
      const std::int64_t o = pl * out_plane + static_cast<std::int64_t>(py) * ow;
      _mm512_mask_storeu_ps(out + o, out_mask, best);
      _mm512_mask_storeu_epi32(argmax + o, out_mask, best_index);
    }
  }
  return true;
}
#endif

}  // namespace

void maxpool_forward(float* out, std::int32_t* argmax, const float* in, std::int64_t n, const PoolShape& shape) {
#ifdef __AVX512F__
  if (maxpool_2x2_rows(out, argmax, in, n * shape.channels, shape)) return;
#endif
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
