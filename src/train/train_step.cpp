#include "cnn/train_step.hpp"

#include "cnn/divergence.hpp"
#include "cnn/watchdog.hpp"

namespace cnn {

bool train_step(Backend& backend, Communicator& comm, const OptimizerSettings& optimizer, std::int64_t param_count,
                Range global_batch, PhaseTimes& times, OverlapReducer* overlap, DivergenceGuard* guard) {
  const Range mine = rank_slice(global_batch, comm.rank(), comm.size());
  heartbeat(WatchPhase::kForwardBackward);
  const bool overlapped = overlap != nullptr && comm.size() > 1;
  if (overlapped) {
    // The allreduce runs inside, under the backward; what the host waited for it is the phase.
    backend.compute_gradients_overlapped(mine.begin, mine.count, *overlap);
    times.add(Phase::kAllreduce, overlap->take_host_wait_seconds());
  } else {
    backend.compute_gradients(mine.begin, mine.count);
  }
  if (comm.size() > 1 && !overlapped) {
    backend.synchronize();  // so the allreduce phase measures communication, not queued compute
    heartbeat(WatchPhase::kAllreduce);
    const double start = wall_seconds();
    comm.allreduce_sum(backend.grads(), param_count);
    backend.synchronize();
    times.add(Phase::kAllreduce, wall_seconds() - start);
  }
  if (guard) guard->after_exchange(backend);  // the NaN test hook's fault, if this is its step
  // Non-finite values survive the sum, so every rank reaches the same verdict (src/train/divergence.cpp).
  if (guard && !guard->update_allowed(backend, mine, comm.size() > 1)) return false;
  heartbeat(WatchPhase::kUpdate);
  // The buffer holds the sum over the whole global batch; the update divides by its size.
  backend.apply_update(optimizer, 1.0f / static_cast<float>(global_batch.count));
  return true;
}

void apply_binding(Backend& backend, const DataBinding& binding) {
  if (binding.train != nullptr) backend.bind_data(*binding.train, *binding.test);
  if (binding.order != nullptr) backend.begin_epoch(*binding.order);
}

BatchStats evaluate_test_set(Backend& backend, const MpiWorld& world, std::int64_t count, std::int64_t held_from) {
  const Range mine = rank_slice({0, count}, world.rank(), world.size());
  heartbeat(WatchPhase::kEval);
  const BatchStats local = backend.evaluate(mine.begin - held_from, mine.count);
  heartbeat(WatchPhase::kEvalReduce);
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
