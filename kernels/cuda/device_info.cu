// What the CUDA runtime reports about the GPUs, and the shapes the kernels support.
#include <array>
#include <atomic>
#include <string>

#include "cnn/cuda_backend.hpp"
#include "cnn/errors.hpp"
#include "cnn/op_plan.hpp"
#include "cuda/cuda_check.hpp"
#include "ops/cuda_ops.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/launch.hpp"
#include "ops/seed_shape.hpp"
#include "ops/wgmma_instructions.cuh"

namespace cnn {

int cuda_device_count() {
  int count = 0;
  // No driver, no device or a broken install all mean "no usable GPU" here; the caller decides
  // whether that is an error. cudaGetDeviceCount's errors are not sticky, so nothing to clear.
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

namespace cuda {

bool dependent_launch_enabled() {
  // Per device, because a process may drive more than one (tests); 0 = not asked yet, 1 = no, 2 = yes.
  static std::array<std::atomic<int>, 64> supported{};
  int device = 0;
  CNN_CHECK_CUDA(cudaGetDevice(&device));
  if (device < 0 || device >= static_cast<int>(supported.size())) return false;
  int known = supported[device].load(std::memory_order_relaxed);
  if (known == 0) {
    int major = 0;
    CNN_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    known = major >= 9 ? 2 : 1;
    supported[device].store(known, std::memory_order_relaxed);
  }
  return known == 2;
}

namespace {
// Writes whether the code that runs is sm_90a's (CNN_HAVE_WGMMA): a binary built for "90" only runs
// sm_90 code on an H100, where the wgmma instructions are absent.
__global__ void wgmma_probe_kernel(int* built) { *built = CNN_HAVE_WGMMA; }
}  // namespace

bool wgmma_available() {
  // Per device, as dependent_launch_enabled: 0 = not asked yet, 1 = no, 2 = yes.
  static std::array<std::atomic<int>, 64> available{};
  int device = 0;
  CNN_CHECK_CUDA(cudaGetDevice(&device));
  if (device < 0 || device >= static_cast<int>(available.size())) return false;
  int known = available[device].load(std::memory_order_relaxed);
  if (known == 0) {
    int major = 0, minor = 0;
    CNN_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CNN_CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    int built = 0;
    if (major == 9 && minor == 0) {
      int* d_built = nullptr;
      CNN_CHECK_CUDA(cudaMalloc(&d_built, sizeof(int)));
      wgmma_probe_kernel<<<1, 1>>>(d_built);
      CNN_CHECK_LAUNCH();
      CNN_CHECK_CUDA(cudaMemcpy(&built, d_built, sizeof(int), cudaMemcpyDeviceToHost));
      CNN_CHECK_CUDA(cudaFree(d_built));
    }
    known = built != 0 ? 2 : 1;
    available[device].store(known, std::memory_order_relaxed);
  }
  return known == 2;
}

int multiprocessor_count() {
  int device = 0;
  CNN_CHECK_CUDA(cudaGetDevice(&device));
  int count = 0;
  CNN_CHECK_CUDA(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

bool seed_shape_supported(const SeedModel& m) { return cuda_conv_relu_pool_supported(m); }

void check_seed_shape(const SeedModel& m) {
  if (seed_shape_supported(m)) return;
  // Which of the predicate's conditions fails, for the message; the last one left is the empty layer.
  std::string problem = "an empty layer";
  if (m.kernel != kSeedKernel) problem = "a " + std::to_string(m.kernel) + "x" + std::to_string(m.kernel) + " kernel";
  else if (m.input.channels != 1 && m.input.channels != 3)
    problem = std::to_string(m.input.channels) + " input channels";
  else if (m.classes != kSeedClasses) problem = std::to_string(m.classes) + " classes";
  throw UsageError("the cuda backend supports the seed CNN with a 3x3 kernel, 1 or 3 input channels and 10 "
                   "classes; this model has " + problem + " (use --backend seq or threads)");
}

}  // namespace cuda
}  // namespace cnn
