// What the device communicators need of a cuda backend (the fused seed step or the layer-by-layer
// one): the GPU it runs on and the stream every one of its operations is ordered on, so a collective
// queued there needs no extra synchronisation with the step before or after it.
#pragma once

#include <cuda_runtime.h>

#include "cnn/backend.hpp"

namespace cnn::cuda {

class DeviceBackend : public Backend {
 public:
  virtual cudaStream_t stream() const = 0;
  virtual int device() const = 0;
};

}  // namespace cnn::cuda
