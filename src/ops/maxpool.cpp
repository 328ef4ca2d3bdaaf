// Max-pooling as plain loops (the twin of kernels/ops/maxpool.cu).
#include "cnn/layer_ops.hpp"

#include <algorithm>
#include <cstdint>

namespace cnn {

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

}  // namespace cnn
