// The convolution's column matrices on the host (src/layers/conv.cpp): im2col, its adjoint col2im,
// and the blocked transposes the convolution's products need. Single-threaded. Private to src/.
#pragma once

#include <cstdint>

#include "cnn/layer_ops.hpp"

namespace cnn::conv_columns {

// The rows of the channels [first, first + count):
// col[((c - first)*K + i)*K + j][s*OHW + y*OW + x] = in[s, c, y*S + i - P, x*S + j - P] (0 outside),
// for the `chunk` samples starting at `in`; the row length is chunk*OHW.
void im2col(float* col, const float* in, std::int64_t chunk, const ConvShape& shape, int first, int count);

// The adjoint of im2col for the same channels: grad_in[s, c, h, w] = the sum of the dcol entries
// im2col read it into, in (i, j) order. Overwrites those channels of grad_in for the chunk's samples.
void col2im(float* grad_in, const float* dcol, std::int64_t chunk, const ConvShape& shape, int first, int count);

// dst[c * dst_stride + r] = src[r * src_stride + c] for r < rows, c < cols (accumulate: +=).
void transpose(float* dst, std::int64_t dst_stride, const float* src, std::int64_t src_stride, std::int64_t rows,
               std::int64_t cols, bool accumulate);

}  // namespace cnn::conv_columns
