// The bn layer on the device, the twin of src/layers/bn.cpp: not written yet. make_backend
// (src/train/backend_factory.cpp) refuses a network with bn layers on the cuda backend with one
// line, so this factory is never reached; it exists for the table of layers.def.
#include <stdexcept>

#include "cuda/device_op.hpp"

namespace cnn::cuda {

std::unique_ptr<DeviceOp> make_bn_op(const Op&, const Network&, OpShared&) {
  throw std::logic_error("make_bn_op: the bn layer has no CUDA op yet (make_backend refuses it on cuda)");
}

}  // namespace cnn::cuda
