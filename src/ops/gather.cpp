// Batch gathering: the data set stays uint8; a batch is normalised to [0, 1] floats as it is gathered.
#include "cnn/ops.hpp"

namespace cnn {

namespace {
constexpr float kPixelScale = 1.0f / 255.0f;
}

void gather_normalize(float* out, const std::uint8_t* images, const std::int32_t* indices, std::int64_t n,
                      std::int64_t sample_size) {
  for (std::int64_t s = 0; s < n; ++s) {
    const std::uint8_t* src = images + static_cast<std::int64_t>(indices[s]) * sample_size;
    float* dst = out + s * sample_size;
    for (std::int64_t i = 0; i < sample_size; ++i) dst[i] = static_cast<float>(src[i]) * kPixelScale;
  }
}

void gather_augment(float* out, const std::uint8_t* images, const std::int32_t* indices, std::int64_t n,
                    const TensorShape& shape, const Augment& augment, const MaskOrigin& origin) {
  const std::int64_t height = shape.height, width = shape.width, plane = height * width;
  const std::int64_t sample_size = shape.size();
  for (std::int64_t s = 0; s < n; ++s) {
    const AugmentDraw draw = augment_draw(augment.pad, augment.flip, origin.step_key,
                                          static_cast<std::uint64_t>(origin.first_sample + s));
    const std::uint8_t* src = images + static_cast<std::int64_t>(indices[s]) * sample_size;
    float* dst = out + s * sample_size;
    for (std::int64_t y = 0; y < height; ++y)
      for (std::int64_t x = 0; x < width; ++x) {
        const std::int64_t from = augment_source(draw, augment.pad, y, x, height, width);
        for (std::int64_t c = 0; c < shape.channels; ++c)
          dst[c * plane + y * width + x] = from < 0 ? 0.0f : static_cast<float>(src[c * plane + from]) * kPixelScale;
      }
  }
}

void gather_labels(std::uint8_t* labels_out, const std::uint8_t* labels, const std::int32_t* indices, std::int64_t n) {
  for (std::int64_t s = 0; s < n; ++s) labels_out[s] = labels[indices[s]];
}

}  // namespace cnn
