// The CPU backend, for every network. `seq` is the readable reference: the ops of ops.hpp and
// layer_ops.hpp layer by layer, nothing fused, in plain loops on one thread. `threads` runs the very
// same loop body on every core, with the fused ops the network builder picks for the CPU
// (op_plan.hpp): each thread takes a contiguous share of the step's samples and sums their gradients
// into its own buffer; the buffers are then added in thread order, so a run is bitwise reproducible
// for a given thread count.
#pragma once

#include <memory>

#include "cnn/backend.hpp"

namespace cnn {

// options.kind: kSeq (always one thread) or kThreads (options.threads OpenMP threads).
std::unique_ptr<Backend> make_cpu_backend(const Network& network, const BackendOptions& options);

}  // namespace cnn
