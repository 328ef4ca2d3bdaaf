#include "cnn/scaling_advisor.hpp"

#include "cnn/errors.hpp"
#include "cnn/exchange_calibration.hpp"
#include "cnn/scaling_report.hpp"

namespace cnn {

GradientExchange choose_gradient_exchange(const ExchangeOptions& options, const MpiWorld& world, Backend& backend,
                                          std::unique_ptr<Communicator> comm, Range first_batch,
                                          std::int64_t param_count) {
  GradientExchange exchange;
  const bool device = backend.memory_space() == MemorySpace::kDevice;
  if (!device && (options.allreduce == AllreducePath::kNccl || options.allreduce == AllreducePath::kPeer))
    throw UsageError("--allreduce " + std::string(allreduce_name(options.allreduce)) +
                     " needs GPU ranks (--device gpu); CPU ranks reduce with MPI");
  if (world.size() == 1) {
    exchange.comm = std::move(comm);
    return exchange;
  }
  const CalibrationHarness harness(world, backend, rank_slice(first_batch, world.rank(), world.size()), param_count);

  const double compute = harness.compute_seconds();
  TimedPaths paths = time_allreduce_paths(harness, options.allreduce, std::move(comm), options.peer_blocks);
  exchange.path = paths.name();
  exchange.comm = std::move(paths.comm);
  const AllreduceCost cost = measure_allreduce_cost(harness, *exchange.comm, paths.seconds());
  OverlapDecision overlap = choose_overlap(harness, *exchange.comm, cost, compute, paths.seconds(), options.overlap,
                                           options.overlap_cuts);
  exchange.overlap = std::move(overlap.reducer);

  // The calibration steps leave no trace in the run's statistics.
  (void)backend.take_train_stats();
  (void)backend.take_phase_times();
  (void)exchange.comm->take_async_times();
  if (exchange.overlap) (void)exchange.overlap->take_host_wait_seconds();

  if (harness.root()) {
    ScalingMeasurements m;
    m.ranks = world.size();
    m.compute = compute;
    m.images_on_rank0 = static_cast<long long>(harness.mine().count);
    for (const TimedPath& p : paths.paths) m.paths.emplace_back(p.name, p.seconds);
    m.path = exchange.path;
    m.allreduce = paths.seconds();
    m.gradient_bytes = static_cast<double>(param_count) * sizeof(float);
    m.cost = cost;
    m.overlap = exchange.overlap != nullptr;
    m.buckets = exchange.overlap ? exchange.overlap->plan().buckets.size() : 1;
    m.overlapped = overlap.overlapped_seconds;
    m.plain = overlap.plain_seconds;
    m.plan_text = overlap.plan_text;
    m.overlap_reason = overlap.reason;
    m.requested_path = options.allreduce;
    m.requested_overlap = options.overlap;
    const ScalingPrediction prediction = predict_scaling(m);
    exchange.report = scaling_report(m, prediction);
    append_scaling_log(options.run_dir, m, prediction);
  }
  return exchange;
}

}  // namespace cnn
