// A training step captured as a CUDA graph once per batch size and replayed with only its index copy
// changed: the step's first work is a copy of its slice of the epoch's permutation into the batch's
// index buffer (enqueue_index_copy), and each replay points that copy at the next slice. Shared by
// the fused seed step, its overlapped (communication inside) variant, and the layer backend.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

namespace cnn::cuda {

struct StepGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaGraphNode_t index_copy = nullptr;  // the copy into the batch's index buffer (a kernel node)
  cudaKernelNodeParams index_copy_params{};  // as captured; each replay changes its source
};

// Queues the copy of `count` indices into the batch's index buffer on `stream`. A kernel, not a
// memcpy: the step's first kernel after it can then launch as its dependent (dependent_launch.cuh),
// where a copy would be an ordinary full dependency in front of every step.
void enqueue_index_copy(std::int32_t* batch_indices, const std::int32_t* indices, std::int64_t count,
                        cudaStream_t stream);

// Captures what `enqueue` queues on `stream` into `step` and instantiates it. The index copy is
// found among the graph's roots by its kernel and its destination, `batch_indices` (NCCL's captured
// work may add roots of its own). On failure, ends the capture, frees what was made, and rethrows; a graph
// without that copy is an internal error whose message ends with `hint`.
void capture_step_graph(StepGraph& step, cudaStream_t stream, const std::function<void()>& enqueue,
                        const std::int32_t* batch_indices, const char* hint);

// Replays `step` on `stream` with its index copy reading `count` indices from `indices`.
void launch_step_graph(const StepGraph& step, std::int32_t* batch_indices, const std::int32_t* indices,
                       std::int64_t count, cudaStream_t stream);

void destroy_step_graph(StepGraph& step) noexcept;

}  // namespace cnn::cuda
