// Both data splits in device memory, as uint8, for the device backend (device_backend.hpp):
// uploaded once in memory mode, re-bound at every window in stream mode (docs/DATA.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "cnn/dataset.hpp"
#include "cnn/errors.hpp"
#include "cuda/device_buffer.hpp"

namespace cnn::cuda {

struct DeviceDataset {
  DeviceBuffer<std::uint8_t> train_images, train_labels, test_images, test_labels;
  DeviceBuffer<std::int32_t> test_order;  // 0 .. test_count-1: evaluation goes in order
  std::int64_t train_count = 0, test_count = 0;
  DeviceBuffer<std::int32_t> order;       // this epoch's global order of the training samples
  std::int64_t order_size = 0;

  // Uploads the epoch's order, once per epoch. The sync lets the caller free its vector and keeps
  // earlier steps, which read the old order, from racing with the copy. Returns true when the buffer
  // moved (graphs captured with the old address must go).
  bool set_order(const std::vector<std::int32_t>& permutation, cudaStream_t stream) {
    const auto size = static_cast<std::int64_t>(permutation.size());
    if (size > train_count)
      throw InputError("the epoch's order has " + std::to_string(size) + " entries but the training set only " +
                       std::to_string(train_count));
    const bool moved = order.reserve(size);
    if (size > 0)
      CNN_CHECK_CUDA(cudaMemcpyAsync(order.get(), permutation.data(), static_cast<std::size_t>(size) * sizeof(std::int32_t),
                                     cudaMemcpyHostToDevice, stream));
    CNN_CHECK_CUDA(cudaStreamSynchronize(stream));
    order_size = size;
    return moved;
  }

  // Uploads both splits; `sample` is the model's C*H*W, `model` its description for the error.
  // Returns true when a training buffer moved: graphs captured with the old addresses must then go.
  // Buffers grow but never move while new data fits, so graphs stay valid across re-binds.
  bool bind(const Dataset& train, const Dataset& test, std::int64_t sample, const std::string& model,
            cudaStream_t stream) {
    for (const Dataset* data : {&train, &test})
      if (data->shape.size() != sample || static_cast<std::int64_t>(data->images.size()) != data->count() * sample)
        throw InputError("data set " + data->name + " does not match the model's input " + model);
    // Steps queued on the stream may still read the old data, and the blocking cudaMemcpy below does
    // not wait for a non-blocking stream.
    CNN_CHECK_CUDA(cudaStreamSynchronize(stream));
    train_count = train.count();
    test_count = test.count();
    bool moved = false;
    moved |= train_images.reserve(static_cast<std::int64_t>(train.images.size()));
    moved |= train_labels.reserve(train_count);
    test_images.reserve(static_cast<std::int64_t>(test.images.size()));
    test_labels.reserve(test_count);
    test_order.reserve(test_count);
    std::vector<std::int32_t> order(static_cast<std::size_t>(test_count));
    std::iota(order.begin(), order.end(), 0);
    // Synchronous copies of the host data's own sizes (a buffer may be larger): the host vectors may
    // go away once this returns.
    const auto upload = [](void* device, const void* host, std::size_t bytes) {
      if (bytes > 0) CNN_CHECK_CUDA(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
    };
    upload(train_images.get(), train.images.data(), train.images.size());
    upload(train_labels.get(), train.labels.data(), train.labels.size());
    upload(test_images.get(), test.images.data(), test.images.size());
    upload(test_labels.get(), test.labels.data(), test.labels.size());
    upload(test_order.get(), order.data(), order.size() * sizeof(std::int32_t));
    return moved;
  }
};

}  // namespace cnn::cuda
