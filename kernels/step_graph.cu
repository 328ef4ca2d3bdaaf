// capture_step_graph, launch_step_graph (step_graph.hpp).
#include "step_graph.hpp"

#include <string>
#include <vector>

#include "cnn/errors.hpp"
#include "cuda_check.hpp"

namespace cnn::cuda {
namespace {

cudaGraphNode_t find_index_copy(cudaGraph_t graph, const std::int32_t* batch_indices, std::size_t& roots) {
  roots = 0;
  CNN_CHECK_CUDA(cudaGraphGetRootNodes(graph, nullptr, &roots));
  std::vector<cudaGraphNode_t> nodes(roots);
  if (roots > 0) CNN_CHECK_CUDA(cudaGraphGetRootNodes(graph, nodes.data(), &roots));
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    CNN_CHECK_CUDA(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeMemcpy) continue;
    cudaMemcpy3DParms copy{};
    CNN_CHECK_CUDA(cudaGraphMemcpyNodeGetParams(node, &copy));
    if (copy.dstPtr.ptr == static_cast<const void*>(batch_indices)) return node;
  }
  return nullptr;
}

}  // namespace

void capture_step_graph(StepGraph& step, cudaStream_t stream, const std::function<void()>& enqueue,
                        const std::int32_t* batch_indices, const char* hint) {
  try {
    CNN_CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue();
    } catch (...) {
      cudaGraph_t broken = nullptr;
      (void)cudaStreamEndCapture(stream, &broken);  // ends the capture; the first error is the one to report
      if (broken != nullptr) (void)cudaGraphDestroy(broken);
      throw;
    }
    CNN_CHECK_CUDA(cudaStreamEndCapture(stream, &step.graph));
    std::size_t roots = 0;
    step.index_copy = find_index_copy(step.graph, batch_indices, roots);
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
  CNN_CHECK_CUDA(cudaGraphExecMemcpyNodeSetParams1D(step.exec, step.index_copy, batch_indices, indices,
                                                    static_cast<std::size_t>(count) * sizeof(std::int32_t),
                                                    cudaMemcpyDeviceToDevice));
  CNN_CHECK_CUDA(cudaGraphLaunch(step.exec, stream));
}

void destroy_step_graph(StepGraph& step) noexcept {
  if (step.exec != nullptr) (void)cudaGraphExecDestroy(step.exec);
  if (step.graph != nullptr) (void)cudaGraphDestroy(step.graph);
  step = StepGraph{};
}

}  // namespace cnn::cuda
