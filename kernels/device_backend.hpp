// What the two cuda backends (the fused seed step and the layer-by-layer one) share, and what the
// device communicators need of them: the GPU they run on and the stream every one of their
// operations is ordered on, so a collective queued there needs no extra synchronisation with the step
// before or after it; and the divergence check over their gradient buffer (kernels/nonfinite.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "cnn/backend.hpp"
#include "nonfinite.cuh"

namespace cnn::cuda {

class DeviceBackend : public Backend {
 public:
  virtual cudaStream_t stream() const = 0;
  virtual int device() const = 0;
  // Floats in the flat buffers (params(), grads()): what a communicator must be able to reduce.
  virtual std::int64_t param_count() const = 0;

  // The divergence check on grads() (Backend's contract); the deferred one's word gates the update
  // through update_skip_flag().
  std::int64_t first_nonfinite_grad() override;
  bool enqueue_nonfinite_check() override;
  std::int64_t enqueued_nonfinite_result() override;
  void set_grad_for_test(std::int64_t index, float value) override;

 protected:
  // Called by the constructor once the device is selected and stream() exists.
  void make_nonfinite_check();
  // For apply_optimizer: set when the last enqueued check found a non-finite gradient.
  const unsigned long long* update_skip_flag() const { return nonfinite_check_->skip_flag(); }

 private:
  std::unique_ptr<DeferredNonFiniteCheck> nonfinite_check_;
};

}  // namespace cnn::cuda
