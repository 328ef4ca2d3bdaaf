// capture_step_graph, launch_step_graph (step_graph.hpp).
#include "cuda/step_graph.hpp"

#include <string>
#include <vector>

#include "cnn/errors.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/launch.hpp"

namespace cnn::cuda {
namespace {

__global__ void index_copy_kernel(std::int32_t* __restrict__ batch_indices, const std::int32_t* __restrict__ indices,
                                  std::int64_t count) {
  start_after_previous_kernel();
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    batch_indices[i] = indices[i];
}

cudaGraphNode_t find_index_copy(cudaGraph_t graph, const std::int32_t* batch_indices, std::size_t& roots,
                                cudaKernelNodeParams& params) {
  roots = 0;
  CNN_CHECK_CUDA(cudaGraphGetRootNodes(graph, nullptr, &roots));
  std::vector<cudaGraphNode_t> nodes(roots);
  if (roots > 0) CNN_CHECK_CUDA(cudaGraphGetRootNodes(graph, nodes.data(), &roots));
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    CNN_CHECK_CUDA(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeKernel) continue;
    CNN_CHECK_CUDA(cudaGraphKernelNodeGetParams(node, &params));
    if (params.func != reinterpret_cast<void*>(index_copy_kernel)) continue;
    if (*static_cast<std::int32_t**>(params.kernelParams[0]) == batch_indices) return node;
  }
  return nullptr;
}

}  // namespace

void enqueue_index_copy(std::int32_t* batch_indices, const std::int32_t* indices, std::int64_t count,
                        cudaStream_t stream) {
  if (count <= 0) return;
  launch_dependent(index_copy_kernel, grid_for(count), kBlockThreads, 0, stream, batch_indices, indices, count);
  CNN_CHECK_CUDA(cudaGetLastError());
}

void capture_step_graph(StepGraph& step, cudaStream_t stream, const std::function<void()>& enqueue,
                        const std::int32_t* batch_indices, const char* hint) {
  try {
    CNN_CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    FlightCaptureTally tally;  // the collectives queued into the graph are recorded at its replays
    try {
      enqueue();
      step.collectives = tally.take();
    } catch (...) {
      cudaGraph_t broken = nullptr;
      (void)cudaStreamEndCapture(stream, &broken);  // ends the capture; the first error is the one to report
      if (broken != nullptr) (void)cudaGraphDestroy(broken);
      throw;
    }
    CNN_CHECK_CUDA(cudaStreamEndCapture(stream, &step.graph));
    std::size_t roots = 0;
    step.index_copy = find_index_copy(step.graph, batch_indices, roots, step.index_copy_params);
    if (step.index_copy == nullptr)
      throw Error(ExitCode::kFailure, "internal error: the captured training step has no index copy among its " +
                                          std::to_string(roots) + " roots HINT: " + hint);
    // Each kernel node keeps its stream's priority (dependent_launch.cuh), not the launching stream's.
    CNN_CHECK_CUDA(cudaGraphInstantiate(&step.exec, step.graph, cudaGraphInstantiateFlagUseNodePriority));
  } catch (...) {
    destroy_step_graph(step);
    throw;
  }
}

void launch_step_graph(const StepGraph& step, std::int32_t* batch_indices, const std::int32_t* indices,
                       std::int64_t count, cudaStream_t stream) {
  // The graph was captured for this batch size, so the grid stays; only the arguments change.
  cudaKernelNodeParams params = step.index_copy_params;
  void* args[] = {&batch_indices, &indices, &count};
  params.kernelParams = args;
  params.extra = nullptr;
  CNN_CHECK_CUDA(cudaGraphExecKernelNodeSetParams(step.exec, step.index_copy, &params));
  CNN_CHECK_CUDA(cudaGraphLaunch(step.exec, stream));
  FlightCaptureTally::record_replay(step.collectives);
}

void destroy_step_graph(StepGraph& step) noexcept {
  if (step.exec != nullptr) (void)cudaGraphExecDestroy(step.exec);
  if (step.graph != nullptr) (void)cudaGraphDestroy(step.graph);
  step = StepGraph{};
}

void StepGraphCache::set_generation(std::uint64_t generation) noexcept {
  if (generation == generation_) return;
  clear();
  generation_ = generation;
}

void StepGraphCache::run(std::int64_t n, std::int32_t* batch_indices, const std::int32_t* indices, bool eager,
                         cudaStream_t stream, StepTimer& timer, const Enqueue& enqueue) {
  const auto found = graphs_.find(n);
  if (!enabled_ || eager || found == graphs_.end()) {
    timer.open();
    enqueue(indices, true);
    if (!enabled_ || found != graphs_.end()) return;
    // Captured right after the eager step; the index copy's source is set again at every replay.
    StepGraph step;
    capture_step_graph(step, stream, [&] { enqueue(indices, false); }, batch_indices, hint_);
    graphs_.emplace(n, step);
    return;
  }
  timer.open();
  launch_step_graph(found->second, batch_indices, indices, n, stream);
  timer.close_graph_step();
}

void StepGraphCache::clear() noexcept {
  for (auto& [n, step] : graphs_) destroy_step_graph(step);
  graphs_.clear();
}

}  // namespace cnn::cuda
