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

namespace {
// A yes-or-no fact about the current device, found by `find(device)` once per device: a process may
// drive more than one (tests). `known` holds 0 = not asked yet, 1 = no, 2 = yes, per device.
template <class Find>
bool per_device(std::array<std::atomic<int>, 64>& known, Find find) {
  int device = 0;
  CNN_CHECK_CUDA(cudaGetDevice(&device));
  if (device < 0 || device >= static_cast<int>(known.size())) return false;
  int fact = known[device].load(std::memory_order_relaxed);
  if (fact == 0) {
    fact = find(device) ? 2 : 1;
    known[device].store(fact, std::memory_order_relaxed);
  }
  return fact == 2;
}

// Writes whether the code that runs is sm_90a's (CNN_HAVE_WGMMA): a binary built for "90" only runs
// sm_90 code on an H100, where the wgmma instructions are absent.
__global__ void wgmma_probe_kernel(int* built) { *built = CNN_HAVE_WGMMA; }
}  // namespace

bool dependent_launch_enabled() {
  static std::array<std::atomic<int>, 64> known{};
  return per_device(known, [](int device) {
    int major = 0;
    CNN_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 9;
  });
}

bool wgmma_available() {
  static std::array<std::atomic<int>, 64> known{};
  return per_device(known, [](int device) {
    int major = 0, minor = 0;
    CNN_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CNN_CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    if (major != 9 || minor != 0) return false;  // sm_90a code runs on 9.0 alone
    int* d_built = nullptr;
    int built = 0;
    CNN_CHECK_CUDA(cudaMalloc(&d_built, sizeof(int)));
    wgmma_probe_kernel<<<1, 1>>>(d_built);
    CNN_CHECK_LAUNCH();
    CNN_CHECK_CUDA(cudaMemcpy(&built, d_built, sizeof(int), cudaMemcpyDeviceToHost));
    CNN_CHECK_CUDA(cudaFree(d_built));
    return built != 0;
  });
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
