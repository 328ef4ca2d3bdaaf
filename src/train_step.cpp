#include "cnn/train_step.hpp"

namespace cnn {

void train_step(Backend& backend, Communicator& comm, const OptimizerSettings& optimizer, std::int64_t param_count,
                Range global_batch, PhaseTimes& times) {
  train_step(backend, comm, optimizer, param_count, global_batch, times, nullptr);
}

void train_step(Backend& backend, Communicator& comm, const OptimizerSettings& optimizer, std::int64_t param_count,
                Range global_batch, PhaseTimes& times, OverlapReducer* overlap) {
  const Range mine = rank_slice(global_batch, comm.rank(), comm.size());
  if (overlap != nullptr && comm.size() > 1) {
    // The allreduce runs inside, under the backward; what the host waited for it is the phase.
    backend.compute_gradients_overlapped(mine.begin, mine.count, *overlap);
    times.add(Phase::kAllreduce, overlap->take_host_wait_seconds());
  } else {
    backend.compute_gradients(mine.begin, mine.count);
  }
  if (comm.size() > 1 && overlap == nullptr) {
    backend.synchronize();  // so the allreduce phase measures communication, not queued compute
    const double start = wall_seconds();
    comm.allreduce_sum(backend.grads(), param_count);
    backend.synchronize();
    times.add(Phase::kAllreduce, wall_seconds() - start);
  }
  // The buffer holds the sum over the whole global batch; the update divides by its size.
  backend.apply_update(optimizer, 1.0f / static_cast<float>(global_batch.count));
}

BatchStats evaluate_test_set(Backend& backend, const MpiWorld& world, std::int64_t count, std::int64_t held_from) {
  const Range mine = rank_slice({0, count}, world.rank(), world.size());
  const BatchStats local = backend.evaluate(mine.begin - held_from, mine.count);
  double sums[2] = {local.loss_sum, 0.0};
  std::int64_t counts[2] = {local.correct, local.count};
  world.allreduce_sum(sums, 1);
  world.allreduce_sum(counts, 2);
  BatchStats total;
  total.loss_sum = sums[0];
  total.correct = counts[0];
  total.count = counts[1];
  return total;
}

}  // namespace cnn
