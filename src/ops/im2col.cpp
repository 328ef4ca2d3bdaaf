#include "ops/im2col.hpp"

#include <algorithm>

#include "ops/simd.hpp"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace cnn::conv_columns {

namespace {

using simd::kLanes;
using simd::Vec;

// A stride-1 row of im2col or col2im is a conv output row: 11 floats on the cifar preset's conv2, 3
// on conv3. A memcpy call per row (the glibc call and its size dispatch) or a scalar loop cost more
// than the copy itself (perf: im2col and col2im took as much time as the products they feed), so
// the rows move as whole vectors, their last one masked where the build has AVX-512.
inline void copy_floats(float* dst, const float* src, int count) {
  int x = 0;
  for (; x + kLanes <= count; x += kLanes) simd::store(dst + x, simd::load(src + x));
#ifdef __AVX512F__
  if (x < count) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (count - x)) - 1);
    _mm512_mask_storeu_ps(dst + x, mask, _mm512_maskz_loadu_ps(mask, src + x));
  }
#else
  for (; x < count; ++x) dst[x] = src[x];
#endif
}

// dst[x] += src[x]: element by element, so the sums are those of the scalar loop, bit for bit.
inline void add_floats(float* dst, const float* src, int count) {
  int x = 0;
  for (; x + kLanes <= count; x += kLanes) simd::store(dst + x, simd::load(dst + x) + simd::load(src + x));
#ifdef __AVX512F__
  if (x < count) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (count - x)) - 1);
    const __m512 sum = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, dst + x), _mm512_maskz_loadu_ps(mask, src + x));
    _mm512_mask_storeu_ps(dst + x, mask, sum);
  }
#else
  for (; x < count; ++x) dst[x] += src[x];
#endif
}

// For stride 1: the output columns x in [x0, x1) read input columns x + j - pad inside [0, W).
struct Span {
  int x0, x1;
};
inline Span stride1_span(const ConvShape& sh, int j) {
  const int ow = sh.out_w();
  const int x0 = std::min(ow, std::max(0, sh.pad - j));
  const int x1 = std::max(x0, std::min(ow, sh.width + sh.pad - j));
  return {x0, x1};
}

}  // namespace

namespace {

// im2col for stride 1 without padding, where every output row lies inside the input: per column
// row and sample, OH copies of OW floats at a fixed stride, each one masked load and store with the
// mask set once (the general loop's bounds, spans and fills cost more per row than its copy).
#ifdef __AVX512F__
void im2col_valid_narrow(float* col, const float* in, std::int64_t chunk, const ConvShape& sh, int first, int count) {
  const int oh = sh.out_h(), ow = sh.out_w(), k = sh.kernel, width = sh.width;
  const std::int64_t ohw = static_cast<std::int64_t>(oh) * ow;
  const std::int64_t columns = chunk * ohw;
  const std::int64_t plane = static_cast<std::int64_t>(sh.height) * width;
  const __mmask16 mask = static_cast<__mmask16>((1u << ow) - 1);
  for (int c = first; c < first + count; ++c)
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < k; ++j) {
        float* out = col + ((static_cast<std::int64_t>(c - first) * k + i) * k + j) * columns;
        for (std::int64_t s = 0; s < chunk; ++s) {
          const float* src = in + (s * sh.channels + c) * plane + static_cast<std::int64_t>(i) * width + j;
          for (int y = 0; y < oh; ++y, out += ow, src += width)
            _mm512_mask_storeu_ps(out, mask, _mm512_maskz_loadu_ps(mask, src));
        }
      }
}
#endif

}  // namespace

void im2col(float* col, const float* in, std::int64_t chunk, const ConvShape& sh, int first, int count) {
#ifdef __AVX512F__
  if (sh.stride == 1 && sh.pad == 0 && sh.out_w() <= kLanes) {
    im2col_valid_narrow(col, in, chunk, sh, first, count);
    return;
  }
#endif
  const int oh = sh.out_h(), ow = sh.out_w(), k = sh.kernel;
  const std::int64_t ohw = static_cast<std::int64_t>(oh) * ow;
  const std::int64_t columns = chunk * ohw;
  const std::int64_t plane = static_cast<std::int64_t>(sh.height) * sh.width;
  for (int c = first; c < first + count; ++c)
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < k; ++j) {
        float* row = col + ((static_cast<std::int64_t>(c - first) * k + i) * k + j) * columns;
        const Span span = stride1_span(sh, j);
        for (std::int64_t s = 0; s < chunk; ++s) {
          const float* src_plane = in + (s * sh.channels + c) * plane;
          float* dst = row + s * ohw;
          for (int y = 0; y < oh; ++y) {
            const int h = y * sh.stride + i - sh.pad;
            float* out = dst + static_cast<std::int64_t>(y) * ow;
            if (h < 0 || h >= sh.height) {
              std::fill(out, out + ow, 0.0f);
              continue;
            }
            const float* src = src_plane + static_cast<std::int64_t>(h) * sh.width;
            if (sh.stride == 1) {
              std::fill(out, out + span.x0, 0.0f);
              copy_floats(out + span.x0, src + span.x0 + j - sh.pad, span.x1 - span.x0);
              std::fill(out + span.x1, out + ow, 0.0f);
            } else {
              for (int x = 0; x < ow; ++x) {
                const int w = x * sh.stride + j - sh.pad;
                out[x] = (w >= 0 && w < sh.width) ? src[w] : 0.0f;
              }
            }
          }
        }
      }
}

namespace {

// One sample's channel plane of col2im with each plane row in a register: the row's kernel
// taps arrive as masked loads from the dcol rows, added in (i, j) order as the memory form adds
// them, so the bits are the same (a skipped tap adds +0 here, which leaves every sum unchanged: a
// sum that starts at +0 never becomes -0). The memory form stalled on loads that overlap the
// previous tap's unaligned store by all but one float. AVX-512 only, for planes at most kLanes
// wide and stride 1.
#ifdef __AVX512F__
void col2im_plane_in_registers(float* plane, const float* dcol_c, std::int64_t columns, const ConvShape& sh) {
  const int oh = sh.out_h(), ow = sh.out_w(), k = sh.kernel, width = sh.width;
  for (int h = 0; h < sh.height; ++h) {
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < k; ++i) {
      const int y = h - i + sh.pad;
      if (y < 0 || y >= oh) continue;
      for (int j = 0; j < k; ++j) {
        // Lane w takes dcol[(i, j)][y*OW + w - j + pad] where 0 <= w - j + pad < OW and w < W.
        const int shift = j - sh.pad;
        const int lo = std::max(0, shift), hi = std::min(width, ow + shift);
        if (hi <= lo) continue;
        const __mmask16 mask = static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
        const float* row = dcol_c + (i * k + j) * columns + static_cast<std::int64_t>(y) * ow - shift;
        acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(mask, row));
      }
    }
    _mm512_mask_storeu_ps(plane + static_cast<std::int64_t>(h) * width,
                          static_cast<__mmask16>((1u << width) - 1), acc);
  }
}
#endif

}  // namespace

// Sample by sample and channel by channel, so that the plane being summed stays in L1 while its
// K*K dcol rows pass.
void col2im(float* grad_in, const float* dcol, std::int64_t chunk, const ConvShape& sh, int first, int count) {
  const int oh = sh.out_h(), ow = sh.out_w(), k = sh.kernel;
  const std::int64_t ohw = static_cast<std::int64_t>(oh) * ow;
  const std::int64_t columns = chunk * ohw;
  const std::int64_t plane_size = static_cast<std::int64_t>(sh.height) * sh.width;
  for (std::int64_t s = 0; s < chunk; ++s)
    for (int c = first; c < first + count; ++c) {
      float* plane = grad_in + (s * sh.channels + c) * plane_size;
      const float* dcol_c = dcol + static_cast<std::int64_t>(c - first) * k * k * columns + s * ohw;
#ifdef __AVX512F__
      if (sh.stride == 1 && sh.width <= kLanes) {
        col2im_plane_in_registers(plane, dcol_c, columns, sh);
        continue;
      }
#endif
      std::fill(plane, plane + plane_size, 0.0f);
      for (int i = 0; i < k; ++i)
        for (int j = 0; j < k; ++j) {
          const float* src = dcol_c + (i * k + j) * columns;
          const Span span = stride1_span(sh, j);
          for (int y = 0; y < oh; ++y) {
            const int h = y * sh.stride + i - sh.pad;
            if (h < 0 || h >= sh.height) continue;
            float* dst = plane + static_cast<std::int64_t>(h) * sh.width;
            const float* in_row = src + static_cast<std::int64_t>(y) * ow;
            if (sh.stride == 1) {
              add_floats(dst + span.x0 + j - sh.pad, in_row + span.x0, span.x1 - span.x0);
              continue;
            }
            for (int x = 0; x < ow; ++x) {
              const int w = x * sh.stride + j - sh.pad;
              if (w >= 0 && w < sh.width) dst[w] += in_row[x];
            }
          }
        }
    }
}

// kLanes x kLanes tiles through registers (simd::transpose), the edges element by element. The
// convolution's gradients go through it twice per chunk; the scalar form (a strided store per
// element) took about a tenth of the cifar preset's time.
void transpose(float* dst, std::int64_t dst_stride, const float* src, std::int64_t src_stride, std::int64_t rows,
               std::int64_t cols, bool accumulate) {
  const std::int64_t full_rows = rows - rows % kLanes, full_cols = cols - cols % kLanes;
  for (std::int64_t r = 0; r < full_rows; r += kLanes) {
    for (std::int64_t c = 0; c < full_cols; c += kLanes) {
      Vec tile[kLanes];
      for (int t = 0; t < kLanes; ++t) tile[t] = simd::load(src + (r + t) * src_stride + c);
      simd::transpose(tile);
      for (int t = 0; t < kLanes; ++t) {
        float* out = dst + (c + t) * dst_stride + r;
        simd::store(out, accumulate ? simd::load(out) + tile[t] : tile[t]);
      }
    }
    for (std::int64_t t = r; t < r + kLanes; ++t)
      for (std::int64_t c = full_cols; c < cols; ++c) {
        float& out = dst[c * dst_stride + t];
        out = accumulate ? out + src[t * src_stride + c] : src[t * src_stride + c];
      }
  }
  for (std::int64_t r = full_rows; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      float& out = dst[c * dst_stride + r];
      out = accumulate ? out + src[r * src_stride + c] : src[r * src_stride + c];
    }
}

}  // namespace cnn::conv_columns
