// What the GPU test programs share (gpu_backend*, gpu_layer*, gpu_bn, gpu_precision*, ...): the skip
// where no device is usable, copies to and from the device, poisoned buffers, random inputs, and the
// error measures their tolerances are written in.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "boost_test.hpp"
#include "cnn/cuda_backend.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_buffer.hpp"

namespace cnn::gpu_test {

using cnn::cuda::DeviceBuffer;

// CTest reports this exit status as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt).
constexpr int kSkipExitCode = 77;

// Why no GPU test can run here, or "": no driver, no device, one that cannot be initialised, or
// device 0 below compute capability min_major.
inline std::string why_no_gpu(int min_major = 0) {
  if (cnn::cuda_device_count() == 0) {
    int driver = 0;
    const cudaError_t status = cudaDriverGetVersion(&driver);
    return driver == 0 || status != cudaSuccess
               ? "no NVIDIA driver is loaded (check nvidia-smi)"
               : "cudaGetDeviceCount reports no device (check CUDA_VISIBLE_DEVICES and nvidia-smi)";
  }
  if (const cudaError_t status = cudaFree(nullptr); status != cudaSuccess)
    return std::string("the device cannot be initialised: ") + cudaGetErrorString(status);
  int major = 0;
  CNN_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major < min_major)
    return "this needs compute capability " + std::to_string(min_major) + ".0; device 0 has " + std::to_string(major);
  return "";
}

// Before any test case (a global fixture's constructor): a GPU test that cannot run says so and exits
// 77, never passes.
inline void require_gpu(int min_major = 0) {
  const std::string reason = why_no_gpu(min_major);
  if (reason.empty()) return;
  std::printf("SKIP: no usable CUDA device: %s\n", reason.c_str());
  std::fflush(stdout);
  std::exit(kSkipExitCode);
}

template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  DeviceBuffer<T> buffer(static_cast<std::int64_t>(host.size()));
  if (!host.empty()) CNN_CHECK_CUDA(cudaMemcpy(buffer.get(), host.data(), buffer.bytes(), cudaMemcpyHostToDevice));
  return buffer;
}

template <class T>
std::vector<T> to_host(const DeviceBuffer<T>& buffer) {
  CNN_CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<T> host(static_cast<std::size_t>(buffer.size()));
  if (!host.empty()) CNN_CHECK_CUDA(cudaMemcpy(host.data(), buffer.get(), buffer.bytes(), cudaMemcpyDeviceToHost));
  return host;
}

// All bits set (NaN for floats), so that an element a kernel forgot to write cannot pass by being zero
// in both.
template <class T>
DeviceBuffer<T> poisoned(std::int64_t count) {
  DeviceBuffer<T> buffer(count);
  CNN_CHECK_CUDA(cudaMemset(buffer.get(), 0xff, buffer.bytes()));
  return buffer;
}

// |got - want| / |want| (2-norms; |got - want| where want is zero), infinite when the difference is.
template <class T>
double relative_error(const T* got, const T* want, std::size_t n) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    diff += d * d;
    norm += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  if (!std::isfinite(diff)) return INFINITY;
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

template <class T>
double relative_error(const std::vector<T>& got, const std::vector<T>& want) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  return relative_error(got.data(), want.data(), got.size());
}

// relative_error with |want| floored at `floor`: for values that are zero but for rounding (the bias
// of a layer right before a bn layer), measured against a share of the whole vector's norm.
template <class T>
double floored_relative_error(const T* got, const T* want, std::size_t n, double floor) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    diff += d * d;
    norm += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  if (!std::isfinite(diff)) return INFINITY;
  return std::sqrt(diff) / std::max(std::sqrt(norm), floor);
}

template <class T>
double floored_relative_error(const std::vector<T>& got, const std::vector<T>& want, double floor) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  return floored_relative_error(got.data(), want.data(), got.size(), floor);
}

template <class T>
double norm_of(const std::vector<T>& v) {
  double sum = 0.0;
  for (const T x : v) sum += static_cast<double>(x) * static_cast<double>(x);
  return std::sqrt(sum);
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline std::vector<float> uniform(std::mt19937& rng, std::size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<std::uint8_t> random_bytes(std::mt19937& rng, std::size_t n, int bound) {
  std::uniform_int_distribution<int> dist(0, bound - 1);
  std::vector<std::uint8_t> v(n);
  for (auto& x : v) x = static_cast<std::uint8_t>(dist(rng));
  return v;
}

}  // namespace cnn::gpu_test

// relative_error(got, want) <= tolerance, as one Boost.Test check that prints the error.
#define CHECK_REL(got, want, tolerance, what)                                                   \
  do {                                                                                          \
    const double err_ = cnn::gpu_test::relative_error(got, want);                               \
    BOOST_TEST(err_ <= (tolerance), what << ": relative error " << err_);                       \
  } while (0)
