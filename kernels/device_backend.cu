// The divergence check of both cuda backends (kernels/device_backend.hpp).
#include "device_backend.hpp"

#include "cuda_check.hpp"

namespace cnn::cuda {

void DeviceBackend::make_nonfinite_check() { nonfinite_check_ = std::make_unique<DeferredNonFiniteCheck>(stream()); }

std::int64_t DeviceBackend::first_nonfinite_grad() { return first_nonfinite(grads(), param_count(), stream()); }

bool DeviceBackend::enqueue_nonfinite_check() {
  nonfinite_check_->enqueue(grads(), param_count(), stream());
  return true;
}

std::int64_t DeviceBackend::enqueued_nonfinite_result() { return nonfinite_check_->result(); }

void DeviceBackend::set_grad_for_test(std::int64_t index, float value) {
  CNN_CHECK_CUDA(cudaMemcpyAsync(grads() + index, &value, sizeof(value), cudaMemcpyHostToDevice, stream()));
  CNN_CHECK_CUDA(cudaStreamSynchronize(stream()));  // `value` lives on this frame
}

}  // namespace cnn::cuda
