// The CPU backends. `seq` is the readable reference: the ops of ops.hpp in plain loops on one
// thread. `threads` runs the very same loop body on every core: each thread takes a contiguous
// share of the step's samples and sums their gradients into its own buffer; the buffers are then
// added in thread order, so a run is bitwise reproducible for a given thread count.
#pragma once

#include <memory>
#include <string>

#include "cnn/backend.hpp"

namespace cnn {

// kind: "seq" (always one thread) or "threads" (`threads` OpenMP threads).
// The seed model with its fused conv-relu-pool ops (ops.hpp).
std::unique_ptr<Backend> make_cpu_backend(const SeedModel& model, const std::string& kind, int threads,
                                          OptimizerKind optimizer);
// Any network, layer by layer with the ops of layer_ops.hpp; same threading and determinism.
std::unique_ptr<Backend> make_cpu_layer_backend(const Network& network, const std::string& kind, int threads,
                                                OptimizerKind optimizer);

}  // namespace cnn
