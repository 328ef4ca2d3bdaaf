// What the CUDA runtime reports about the GPUs, and the shapes the kernels support.
#include <string>

#include "cnn/cuda_backend.hpp"
#include "cnn/errors.hpp"
#include "cuda_check.hpp"
#include "cuda_ops.hpp"
#include "launch.hpp"
#include "seed_shape.hpp"

namespace cnn {

int cuda_device_count() {
  int count = 0;
  // No driver, no device or a broken install all mean "no usable GPU" here; the caller decides
  // whether that is an error. cudaGetDeviceCount's errors are not sticky, so nothing to clear.
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

namespace cuda {

int multiprocessor_count() {
  int device = 0;
  CNN_CHECK_CUDA(cudaGetDevice(&device));
  int count = 0;
  CNN_CHECK_CUDA(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

bool seed_shape_supported(const SeedModel& m) {
  return m.kernel == kSeedKernel && (m.input.channels == 1 || m.input.channels == 3) && m.classes == kSeedClasses &&
         m.filters > 0 && m.pooled().height > 0 && m.pooled().width > 0;
}

void check_seed_shape(const SeedModel& m) {
  std::string problem;
  if (m.kernel != kSeedKernel) problem = "a " + std::to_string(m.kernel) + "x" + std::to_string(m.kernel) + " kernel";
  else if (m.input.channels != 1 && m.input.channels != 3)
    problem = std::to_string(m.input.channels) + " input channels";
  else if (m.classes != kSeedClasses) problem = std::to_string(m.classes) + " classes";
  else if (m.filters <= 0 || m.pooled().height <= 0 || m.pooled().width <= 0) problem = "an empty layer";
  if (!problem.empty())
    throw UsageError("the cuda backend supports the seed CNN with a 3x3 kernel, 1 or 3 input channels and 10 "
                     "classes; this model has " + problem + " (use --backend seq or threads)");
}

}  // namespace cuda
}  // namespace cnn
