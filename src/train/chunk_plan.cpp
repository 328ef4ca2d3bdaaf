// --steps-per-launch: whether the loop hands the backend chunks of steps, and where each chunk ends
// (chunk_plan.hpp).
#include "cnn/chunk_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace cnn {
namespace {

// "0.130 ms": a step's seconds as the settings line gives them.
std::string milliseconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f ms", seconds * 1e3);
  return text;
}

}  // namespace

ChunkPlan plan_chunks(const ChunkConditions& c) {
  ChunkPlan plan;
  std::vector<std::string> one_step;  // why the run takes one step per call
  // Several ranks exchange inside the chunk's kernel, or take one step per call with the exchange between.
  if (c.ranks > 1 && !c.kernel_unsupported.empty())
    one_step.push_back(std::to_string(c.ranks) + " ranks: " + c.kernel_unsupported);
  else if (c.ranks > 1 && !c.exchange_unsupported.empty())
    one_step.push_back(std::to_string(c.ranks) + " ranks: " + c.exchange_unsupported);
  if (c.on_nonfinite != NonFinitePolicy::kStop) one_step.push_back("--on-nonfinite skip");
  if (c.stream) one_step.push_back("stream mode");
  if (c.trace) one_step.push_back("--trace");
  if (c.steps_per_launch == 1) one_step.assign(1, "--steps-per-launch 1");
  if (c.steps_per_launch == 0 && one_step.empty() && !c.kernel_unsupported.empty())
    one_step.push_back("auto: " + c.kernel_unsupported);
  // A resumed auto takes the path its checkpoint's run took; otherwise its measurement decides between
  // the two paths the run could take (a tie keeps one step per call).
  const bool resumed = c.steps_per_launch == 0 && one_step.empty() && !c.resumed_path.empty();
  if (resumed && c.resumed_path != "persistent")
    one_step.push_back("auto: one launch per step, as the run it resumes took");
  if (c.steps_per_launch == 0 && one_step.empty() && c.measured && !resumed) {
    if (!c.measured->skipped.empty())
      one_step.push_back("auto: " + c.measured->skipped);
    else if (!(c.measured->chunk_seconds < c.measured->loop_seconds))
      one_step.push_back("auto: one launch per step measured faster: " + milliseconds(c.measured->loop_seconds) +
                         " a step, the persistent kernel " + milliseconds(c.measured->chunk_seconds));
  }
  if (!one_step.empty()) {
    std::string why;
    for (const std::string& each : one_step) why += (why.empty() ? "" : ", ") + each;
    plan.describe = "1 (" + why + ")";
    return plan;
  }
  plan.cap = c.steps_per_launch;  // auto: 0, no cap
  const std::int64_t most = c.steps_per_launch == 0 ? c.steps_per_epoch : std::min(c.steps_per_launch, c.steps_per_epoch);
  const std::string how = !c.kernel_unsupported.empty() ? "one kernel launch per step: " + c.kernel_unsupported
                          : c.ranks > 1 ? "persistent kernel, the gradients summed over the ranks inside it"
                                        : "persistent kernel";
  const std::string measured = resumed ? ", as the run it resumes took"
                               : c.steps_per_launch == 0 && c.measured
                                   ? ": " + milliseconds(c.measured->chunk_seconds) + " a step, one launch per step " +
                                         milliseconds(c.measured->loop_seconds) + ", measured"
                                   : "";
  plan.describe = "up to " + std::to_string(most) + " (" + how + measured + ")";
  if (c.kernel_unsupported.empty()) plan.step_path = "persistent";
  return plan;
}

std::int64_t chunk_end(const ChunkBounds& b) {
  // A chunk's steps share one batch size: an epoch's short last batch runs as a chunk of its own.
  const std::int64_t full_steps = b.train_count / b.batch;
  std::int64_t end = b.step < full_steps ? std::min(full_steps, b.steps_per_epoch) : b.steps_per_epoch;
  if (b.cap > 0) end = std::min(end, b.step + b.cap);
  if (b.steps_until_stop_hook > 0) end = std::min(end, b.step + b.steps_until_stop_hook);
  if (b.checkpoint_due) {
    for (std::int64_t last = b.step + 1; last < end; ++last) {
      if (b.checkpoint_due(b.global_step + (last - b.step))) {
        end = last;
        break;
      }
    }
  }
  return std::max(end, b.step + 1);
}

StepChunk make_step_chunk(const OptimizerSettings& optimizer, const LearningRate& learning_rate, std::uint64_t seed,
                          std::int64_t global_step, Range mine, std::int64_t global_batch, std::int64_t steps,
                          std::int64_t nan_at) {
  StepChunk chunk;
  chunk.first = mine.begin;
  chunk.batch = mine.count;
  chunk.stride = global_batch;
  chunk.optimizer.reserve(static_cast<std::size_t>(steps));
  for (std::int64_t k = 0; k < steps; ++k) {
    OptimizerSettings step = optimizer;
    step.step = global_step + k + 1;  // one update per step, counted over the whole run
    step.lr = learning_rate.at_float(global_step + k);
    chunk.optimizer.push_back(step);
  }
  chunk.grad_scale = 1.0f / static_cast<float>(global_batch);  // as train_step: the sum over the global batch
  chunk.seed = seed;
  chunk.global_step = global_step;
  chunk.nan_at = nan_at;
  return chunk;
}

}  // namespace cnn
