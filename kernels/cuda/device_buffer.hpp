// Owning buffers of device memory and of pinned host memory. Allocation is checked; freeing happens
// in destructors, which cannot throw, so a failed free there is ignored (the process is ending or the
// context is already broken, and the next checked call reports it).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "cuda/cuda_check.hpp"

namespace cnn::cuda {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::int64_t count) { resize(count); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    swap(other);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) (void)cudaFree(data_);
  }

  // Discards the contents.
  void resize(std::int64_t count) {
    if (count == count_) return;
    if (data_ != nullptr) CNN_CHECK_CUDA(cudaFree(data_));
    data_ = nullptr;
    count_ = 0;
    if (count > 0) CNN_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&data_), bytes_for(count)));
    count_ = count;
  }
  // Grows (discarding the contents) when smaller than `count`; returns whether it moved.
  bool reserve(std::int64_t count) {
    if (count <= count_) return false;
    resize(count);
    return true;
  }

  T* get() const { return data_; }
  std::int64_t size() const { return count_; }
  std::size_t bytes() const { return bytes_for(count_); }

 private:
  static std::size_t bytes_for(std::int64_t count) { return static_cast<std::size_t>(count) * sizeof(T); }
  void swap(DeviceBuffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
  }
  T* data_ = nullptr;
  std::int64_t count_ = 0;
};

// Page-locked host memory: the target of asynchronous copies (pageable memory would make them sync).
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::int64_t count) { resize(count); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (data_ != nullptr) (void)cudaFreeHost(data_);
  }

  void resize(std::int64_t count) {
    if (count == count_) return;
    if (data_ != nullptr) CNN_CHECK_CUDA(cudaFreeHost(data_));
    data_ = nullptr;
    count_ = 0;
    if (count > 0)
      CNN_CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&data_), static_cast<std::size_t>(count) * sizeof(T)));
    count_ = count;
  }

  T* get() const { return data_; }
  std::int64_t size() const { return count_; }

 private:
  T* data_ = nullptr;
  std::int64_t count_ = 0;
};

// Whole-buffer copies between a host vector and a device buffer of the same length, finished on
// return (the host vector may go away, and queued steps on `stream` have run): the host side of
// parameters, optimizer state and checkpoints in the device backend.
template <class T>
void copy_to_device(DeviceBuffer<T>& device, const std::vector<T>& host, cudaStream_t stream) {
  if (host.empty()) return;
  CNN_CHECK_CUDA(cudaMemcpyAsync(device.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream));
}

template <class T>
std::vector<T> copy_to_host(const DeviceBuffer<T>& device, cudaStream_t stream) {
  std::vector<T> host(static_cast<std::size_t>(device.size()));
  if (host.empty()) return host;
  CNN_CHECK_CUDA(cudaMemcpyAsync(host.data(), device.get(), device.bytes(), cudaMemcpyDeviceToHost, stream));
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream));
  return host;
}

}  // namespace cnn::cuda
