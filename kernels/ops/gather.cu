// Batch assembly on the device: the data set stays resident as uint8 (a quarter of the bytes of
// float) and each step gathers its samples by index, so nothing crosses PCIe per step.
#include "cuda/cuda_check.hpp"
#include "ops/cuda_ops.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/launch.hpp"
#include "ops/seed_shape.hpp"

namespace cnn::cuda {
namespace {

// One thread per output pixel; consecutive threads read consecutive bytes of one sample.
__global__ void gather_normalize_kernel(float* __restrict__ out /*[n, sample_size]*/,
                                        const std::uint8_t* __restrict__ images /*[N, sample_size]*/,
                                        const std::int32_t* __restrict__ indices /*[n]*/, std::int64_t n,
                                        std::int64_t sample_size) {
  start_after_previous_kernel();
  const std::int64_t total = n * sample_size;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t s = e / sample_size;
    const std::int64_t k = e - s * sample_size;
    out[e] = static_cast<float>(images[static_cast<std::int64_t>(indices[s]) * sample_size + k]) * kPixelScale;
  }
}

// One thread per output pixel, as gather_normalize_kernel; each draws its sample's crop and flip
// (augment.hpp: a few integer multiplies, cheaper than a pass to store the draws) and reads the source
// pixel, or writes 0 in the padding.
__global__ void gather_augment_kernel(float* __restrict__ out /*[n, C*H*W]*/,
                                      const std::uint8_t* __restrict__ images /*[N, C*H*W]*/,
                                      const std::int32_t* __restrict__ indices /*[n]*/, std::int64_t n,
                                      TensorShape shape, int pad, bool flip,
                                      const MaskOrigin* __restrict__ origin) {
  start_after_previous_kernel();
  const MaskOrigin at = *origin;
  const std::int64_t height = shape.height, width = shape.width, plane = height * width;
  const std::int64_t sample_size = plane * shape.channels;
  const std::int64_t total = n * sample_size;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t s = e / sample_size;
    const std::int64_t k = e - s * sample_size;
    const std::int64_t c = k / plane;
    const std::int64_t p = k - c * plane;
    const std::int64_t y = p / width;
    const std::int64_t x = p - y * width;
    const AugmentDraw draw = augment_draw(pad, flip, at.step_key, static_cast<std::uint64_t>(at.first_sample + s));
    const std::int64_t from = augment_source(draw, pad, y, x, height, width);
    out[e] = from < 0 ? 0.0f
                      : static_cast<float>(images[static_cast<std::int64_t>(indices[s]) * sample_size + c * plane + from]) *
                            kPixelScale;
  }
}

__global__ void gather_labels_kernel(std::uint8_t* __restrict__ labels_out /*[n]*/,
                                     const std::uint8_t* __restrict__ labels /*[N]*/,
                                     const std::int32_t* __restrict__ indices /*[n]*/, std::int64_t n) {
  start_after_previous_kernel();
  for (std::int64_t s = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; s < n;
       s += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    labels_out[s] = labels[indices[s]];
}

}  // namespace

void gather_normalize(float* out, const std::uint8_t* images, const std::int32_t* indices, std::int64_t n,
                      std::int64_t sample_size, cudaStream_t stream) {
  if (n <= 0) return;
  launch_dependent(gather_normalize_kernel, grid_for(n * sample_size), kBlockThreads, 0, stream, out, images, indices,
                   n, sample_size);
  CNN_CHECK_LAUNCH();
}

void gather_augment(float* out, const std::uint8_t* images, const std::int32_t* indices, std::int64_t n,
                    const TensorShape& shape, const Augment& augment, const MaskOrigin* origin, cudaStream_t stream) {
  if (n <= 0) return;
  launch_dependent(gather_augment_kernel, grid_for(n * shape.size()), kBlockThreads, 0, stream, out, images, indices, n,
                   shape, augment.pad, augment.flip, origin);
  CNN_CHECK_LAUNCH();
}

void gather_labels(std::uint8_t* labels_out, const std::uint8_t* labels, const std::int32_t* indices,
                   std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  launch_dependent(gather_labels_kernel, grid_for(n), kBlockThreads, 0, stream, labels_out, labels, indices, n);
  CNN_CHECK_LAUNCH();
}

}  // namespace cnn::cuda
