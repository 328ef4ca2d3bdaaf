// The advisor's piece 4: the overlap's buckets and whether to run it (exchange_calibration.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cnn/exchange_calibration.hpp"

namespace cnn {
namespace {

// Where two bucket groupings are compared, each sample runs steps for at least this long: their
// difference can be a few microseconds per step, below what one synchronised GPU step resolves.
constexpr double kGroupingSampleSeconds = 1e-3;

std::string ms(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f ms", 1e3 * seconds);
  return text;
}

// The ready points of the order that overlaps. They are measured by a step with an allreduce
// starting at each of them: a backend may compute in another order when nothing starts early (the
// CUDA seed step's fc-first form), and the planner needs the times of the order that overlaps.
std::vector<GradientReadyPoint> measured_ready_points(const CalibrationHarness& harness, OverlapReducer& reducer,
                                                      const AllreduceCost& cost) {
  const std::vector<GradientReadyPoint> unmeasured = harness.backend().gradient_ready_points();
  const std::uint32_t every_cut = unmeasured.size() >= 2 ? (1u << (unmeasured.size() - 1)) - 1u : 0u;
  reducer.set_plan(plan_with_cuts(unmeasured, harness.param_count(), cost, every_cut));
  harness.overlapped_step(reducer);
  harness.backend().synchronize();
  return harness.backend().gradient_ready_points();
}

// The bucket grouping (the cuts of plan_with_cuts) and why, decided by rank 0 for all ranks: the
// planner's, unless the knob forces one; a grouping of several buckets must also beat one bucket at
// the end in measured steps, since the planner models the allreduces, not the compute an early
// bucket may add (fc-first reads the activations twice).
std::uint32_t choose_grouping(const CalibrationHarness& harness, OverlapReducer& reducer,
                              const std::vector<GradientReadyPoint>& points, const AllreduceCost& cost,
                              double compute, std::optional<std::uint32_t> forced_cuts, std::string& reason) {
  const MpiWorld& world = harness.world();
  std::uint32_t cuts = plan_buckets(points, harness.param_count(), cost).cuts;
  int forced = 0;
  if (forced_cuts) {
    cuts = *forced_cuts;
    forced = 1;
  }
  // Rank 0's choice: each rank measured its own points, and the comparison below is collective.
  world.broadcast(&cuts, sizeof(cuts));
  world.broadcast(&forced, sizeof(forced));
  if (forced) {
    reason = " (CNN_OVERLAP_CUTS)";
  } else if (cuts != 0) {
    // `compute` is the slowest rank's, so every rank runs as many steps (each one allreduces).
    const int steps_per_sample =
        std::clamp(static_cast<int>(std::ceil(kGroupingSampleSeconds / std::max(compute, 1e-9))), 1, 16);
    const auto overlapped_steps = [&] {
      for (int i = 0; i < steps_per_sample; ++i) harness.overlapped_step(reducer);
    };
    reducer.set_plan(plan_with_cuts(points, harness.param_count(), cost, cuts));
    const double grouped = harness.time(overlapped_steps) / steps_per_sample;
    reducer.set_plan(plan_with_cuts(points, harness.param_count(), cost, 0));
    const double single = harness.time(overlapped_steps) / steps_per_sample;
    reason = " (measured " + ms(grouped) + " per step against " + ms(single) + " with one bucket)";
    if (single <= grouped) cuts = 0;  // time() gives every rank the same figures
  }
  world.broadcast(&cuts, sizeof(cuts));  // (so this only guards the rule that rank 0 decides)
  return cuts;
}

}  // namespace

OverlapDecision choose_overlap(const CalibrationHarness& harness, Communicator& comm, const AllreduceCost& cost,
                               double compute, double allreduce, OverlapChoice overlap,
                               std::optional<std::uint32_t> forced_cuts) {
  OverlapDecision decision;
  decision.plain_seconds = compute + allreduce;
  if (overlap == OverlapChoice::kOff) return decision;
  auto reducer = std::make_unique<OverlapReducer>(comm, harness.grads(), harness.param_count());
  const std::vector<GradientReadyPoint> points = measured_ready_points(harness, *reducer, cost);
  std::string grouping_reason;
  const std::uint32_t cuts = choose_grouping(harness, *reducer, points, cost, compute, forced_cuts, grouping_reason);
  reducer->set_plan(plan_with_cuts(points, harness.param_count(), cost, cuts));
  decision.plan_text = reducer->plan().describe() + grouping_reason;
  Backend& backend = harness.backend();
  const Range mine = harness.mine();
  decision.overlapped_seconds = harness.time([&] { harness.overlapped_step(*reducer); });
  decision.plain_seconds = harness.time([&] {
    backend.compute_gradients(mine.begin, mine.count);
    backend.synchronize();
    comm.allreduce_sum(harness.grads(), harness.param_count());
  });
  int use = 1;
  if (overlap == OverlapChoice::kAuto) {
    use = decision.overlapped_seconds < decision.plain_seconds ? 1 : 0;
    decision.reason = use ? " (auto: faster)" : " (auto: not faster, so off)";
  }
  harness.world().broadcast(&use, sizeof(use));
  if (use) decision.reducer = std::move(reducer);
  return decision;
}

}  // namespace cnn
