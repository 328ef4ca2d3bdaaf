#include "cnn/scaling_advisor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cnn/errors.hpp"
#include "cnn/utc_time.hpp"

#ifdef CNN_HAVE_CUDA
#include "cnn/cuda_backend.hpp"
#endif

namespace cnn {

namespace {

constexpr int kRepeats = 3;           // timed repeats per measurement, after one warm-up; the median counts
constexpr double kPaysSpeedup = 1.25; // doubling the ranks must speed a step up at least this much
// Where two bucket groupings are compared, each sample runs steps for at least this long: their
// difference can be a few microseconds per step, below what one synchronised GPU step resolves.
constexpr double kGroupingSampleSeconds = 1e-3;

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Each measurement: the median over repeats on each rank, then the slowest rank's (the step waits for it).
template <class Body>
double timed(const MpiWorld& world, Backend& backend, Body body, int repeats = kRepeats) {
  std::vector<double> samples;
  for (int r = 0; r <= repeats; ++r) {
    backend.synchronize();
    world.barrier();
    const double start = wall_seconds();
    body();
    backend.synchronize();
    if (r > 0) samples.push_back(wall_seconds() - start);  // r == 0 warms up (graph capture, buffers)
  }
  return world.allreduce_max(median(samples));
}

std::string ms(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f ms", 1e3 * seconds);
  return text;
}

std::string pct(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.0f%%", 100.0 * fraction);
  return text;
}


struct PathTiming {
  std::string name;
  std::unique_ptr<Communicator> comm;
  double seconds = 0.0;
};

// Ring allreduce traffic per link relative to the buffer: 2(n-1)/n.
double ring_factor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }

}  // namespace

GradientExchange choose_gradient_exchange(const TrainConfig& config, const MpiWorld& world, Backend& backend,
                                          std::unique_ptr<Communicator> comm,
                                          const std::function<Range()>& bind_first_batch,
                                          std::int64_t param_count, const std::string& run_dir) {
  GradientExchange exchange;
  const bool device = backend.memory_space() == MemorySpace::kDevice;
  if (!device && (config.allreduce == "nccl" || config.allreduce == "peer"))
    throw UsageError("--allreduce " + config.allreduce + " needs GPU ranks (--device gpu); CPU ranks reduce with MPI");
  if (world.size() == 1) {
    exchange.comm = std::move(comm);
    return exchange;
  }
  const bool root = world.rank() == 0;
  const Range mine = rank_slice(bind_first_batch(), world.rank(), world.size());
  float* grads = backend.grads();

  // 1. One training step's compute (forward and backward, no allreduce, no update).
  const double compute = timed(world, backend, [&] { backend.compute_gradients(mine.begin, mine.count); });

  // 2. One allreduce of the real gradient buffer over each path.
  std::vector<PathTiming> paths;
  if (!device) {
    paths.push_back({"mpi", std::move(comm), 0.0});
  } else {
#ifdef CNN_HAVE_CUDA
    const std::string given = device_allreduce_path(config.allreduce);  // the path of `comm`
    std::vector<std::string> names;
    if (config.allreduce != "auto") {
      names = {config.allreduce};
    } else {
      if (device_nccl_available()) names.push_back("nccl");
      // Collective, like the communicators made below: every rank reaches it.
      if (device_peer_unavailable(world, backend).empty()) names.push_back("peer");
      names.push_back("mpi");
    }
    for (const std::string& name : names)
      paths.push_back({name, name == given && comm ? std::move(comm) : make_device_communicator(world, backend, name), 0.0});
    comm.reset();
#else
    throw Error(ExitCode::kFailure, "internal error: device memory in a build without CUDA");
#endif
  }
  for (PathTiming& p : paths)
    p.seconds = timed(world, backend, [&] { p.comm->allreduce_sum(grads, param_count); });
  int chosen = 0;
  for (int i = 1; i < static_cast<int>(paths.size()); ++i)
    if (paths[static_cast<std::size_t>(i)].seconds < paths[static_cast<std::size_t>(chosen)].seconds) chosen = i;
  world.broadcast(&chosen, sizeof(chosen));  // rank 0's choice: every rank must use the same path
  exchange.path = paths[static_cast<std::size_t>(chosen)].name;
  exchange.comm = std::move(paths[static_cast<std::size_t>(chosen)].comm);
  const double allreduce = paths[static_cast<std::size_t>(chosen)].seconds;
  Communicator& c = *exchange.comm;

  // 3. The chosen path's cost over sizes: latency + bytes / bandwidth.
  std::vector<double> sizes, seconds;
  for (std::int64_t count : {std::max<std::int64_t>(param_count / 64, 1), std::max<std::int64_t>(param_count / 8, 1)}) {
    sizes.push_back(static_cast<double>(count) * sizeof(float));
    seconds.push_back(timed(world, backend, [&] { c.allreduce_sum(grads, count); }));
  }
  sizes.push_back(static_cast<double>(param_count) * sizeof(float));
  seconds.push_back(allreduce);
  const AllreduceCost cost = fit_allreduce_cost(sizes, seconds);

  // 4. Overlap: the buckets from the backend's measured ready points, then (auto) overlapped vs plain.
  double overlapped = 0.0, plain = compute + allreduce;
  std::string overlap_reason, plan_text, grouping_reason;
  if (config.overlap != "off") {
    auto reducer = std::make_unique<OverlapReducer>(c, grads, param_count);
    // `compute` is the slowest rank's, so every rank runs as many steps (each one allreduces).
    const int steps_per_sample =
        std::clamp(static_cast<int>(std::ceil(kGroupingSampleSeconds / std::max(compute, 1e-9))), 1, 16);
    const auto overlapped_steps = [&] {
      for (int i = 0; i < steps_per_sample; ++i) backend.compute_gradients_overlapped(mine.begin, mine.count, *reducer);
    };
    // The ready points are measured by a step with an allreduce starting at each of them: a backend
    // may compute in another order when nothing starts early (the CUDA seed step's fc-first form),
    // and the planner needs the times of the order that overlaps.
    const std::vector<GradientReadyPoint> unmeasured = backend.gradient_ready_points();
    const std::uint32_t every_cut = unmeasured.size() >= 2 ? (1u << (unmeasured.size() - 1)) - 1u : 0u;
    reducer->set_plan(plan_with_cuts(unmeasured, param_count, cost, every_cut));
    backend.compute_gradients_overlapped(mine.begin, mine.count, *reducer);  // measures the ready points
    backend.synchronize();
    const std::vector<GradientReadyPoint> points = backend.gradient_ready_points();
    std::uint32_t cuts = plan_buckets(points, param_count, cost).cuts;
    // CNN_OVERLAP_CUTS forces a grouping (tests and A/B: 0 = one bucket, 1 = fc first for the seed model).
    int forced = 0;
    if (const char* given = std::getenv("CNN_OVERLAP_CUTS")) {
      cuts = static_cast<std::uint32_t>(std::strtoul(given, nullptr, 10));
      forced = 1;
    }
    // Rank 0's choice: each rank measured its own points, and the comparison below is collective.
    world.broadcast(&cuts, sizeof(cuts));
    world.broadcast(&forced, sizeof(forced));
    if (forced) {
      grouping_reason = " (CNN_OVERLAP_CUTS)";
    } else if (cuts != 0) {
      // The planner models the allreduces, not the compute an early bucket may add (fc-first reads the
      // activations twice): its grouping must also beat one bucket at the end in measured steps.
      reducer->set_plan(plan_with_cuts(points, param_count, cost, cuts));
      const double grouped = timed(world, backend, overlapped_steps) / steps_per_sample;
      reducer->set_plan(plan_with_cuts(points, param_count, cost, 0));
      const double single = timed(world, backend, overlapped_steps) / steps_per_sample;
      grouping_reason = " (measured " + ms(grouped) + " per step against " + ms(single) + " with one bucket)";
      if (single <= grouped) cuts = 0;  // timed() gives every rank the same figures
    }
    world.broadcast(&cuts, sizeof(cuts));  // (so this only guards the rule that rank 0 decides)
    reducer->set_plan(plan_with_cuts(points, param_count, cost, cuts));
    plan_text = reducer->plan().describe() + grouping_reason;
    overlapped = timed(world, backend, [&] { backend.compute_gradients_overlapped(mine.begin, mine.count, *reducer); });
    plain = timed(world, backend, [&] {
      backend.compute_gradients(mine.begin, mine.count);
      backend.synchronize();
      c.allreduce_sum(grads, param_count);
    });
    int use = 1;
    if (config.overlap == "auto") {
      use = overlapped < plain ? 1 : 0;
      overlap_reason = use ? " (auto: faster)" : " (auto: not faster, so off)";
    }
    world.broadcast(&use, sizeof(use));
    if (use) exchange.overlap = std::move(reducer);
  }

  // The calibration steps leave no trace in the run's statistics.
  (void)backend.take_train_stats();
  (void)backend.take_phase_times();
  (void)exchange.comm->take_async_times();
  if (exchange.overlap) (void)exchange.overlap->take_host_wait_seconds();

  // 5. Predictions. Weak scaling keeps the per-rank compute; the global batch split over twice the
  // ranks halves it. The allreduce grows with the ring's traffic per link, hidden as much as now.
  const int n = world.size();
  const double step = exchange.overlap ? overlapped : plain;
  const double exposed = std::max(0.0, step - compute);
  const double allreduce_2n = allreduce * ring_factor(2 * n) / ring_factor(n);
  // What a step waits beyond its compute (the allreduce not hidden, and waits for slower ranks).
  const double exposed_2n = allreduce > 0.0 ? exposed * allreduce_2n / allreduce : 0.0;
  const double efficiency = compute / (compute + exposed);
  const double weak_2n = compute / (compute + exposed_2n);
  const double speedup_2n = (compute + exposed) / (compute / 2.0 + exposed_2n);

  if (root) {
    std::ostringstream r;
    r << "  scaling advisor: one step's compute " << ms(compute) << " (" << mine.count << " images on rank 0)";
    for (const PathTiming& p : paths) r << "; allreduce " << p.name << " " << ms(p.seconds);
    char size[64];
    std::snprintf(size, sizeof(size), " (%.1f kB)", static_cast<double>(param_count) * sizeof(float) / 1e3);
    r << size << " -> " << exchange.path << (config.allreduce == "auto" ? " (the faster)" : " (--allreduce)") << "\n";
    char line[256];
    std::snprintf(line, sizeof(line), "  allreduce model (%s): %.1f us + bytes / %.2f GB/s\n", exchange.path.c_str(),
                  1e6 * cost.latency_s, cost.seconds_per_byte > 0 ? 1e-9 / cost.seconds_per_byte : 0.0);
    r << line;
    if (config.overlap == "off")
      r << "  overlap: off (--overlap off); step " << ms(plain) << "\n";
    else
      r << "  overlap: " << (exchange.overlap ? "on" : "off") << overlap_reason << "; " << plan_text << "; step "
        << ms(overlapped) << " overlapped vs " << ms(plain) << " plain\n";
    r << "  predicted parallel efficiency: " << pct(efficiency) << " at " << n << " ranks (compute / (compute + "
      << "the step's wait beyond it " << ms(exposed) << ")); at " << 2 * n << " ranks " << pct(weak_2n)
      << " with the same batch per rank, step x";
    std::snprintf(line, sizeof(line), "%.2f", speedup_2n);
    r << line << " faster with the same global batch\n";
    if (speedup_2n < kPaysSpeedup || efficiency < 0.5)
      r << "  WARNING: adding ranks will not pay at this global batch: " << 2 * n << " ranks would make a step only x"
        << line << " faster (allreduce " << ms(allreduce) << " against compute " << ms(compute)
        << " per step); use a larger --batch or fewer ranks\n";
    exchange.report = r.str();
    // One line per start, like runs.log: what was measured and chosen.
    std::ofstream log(run_dir + "/scaling.log", std::ios::app);
    std::snprintf(line, sizeof(line), "%.6f", compute);
    log << utc_time() << ", ranks=" << n << ", compute_s=" << line;
    for (const PathTiming& p : paths) {
      std::snprintf(line, sizeof(line), "%.6f", p.seconds);
      log << ", allreduce_" << p.name << "_s=" << line;
    }
    std::snprintf(line, sizeof(line), ", latency_s=%.3g, GBps=%.3g, exposed_s=%.6f, efficiency=%.3f, efficiency_2n_weak=%.3f, speedup_2n_strong=%.3f",
                  cost.latency_s, cost.seconds_per_byte > 0 ? 1e-9 / cost.seconds_per_byte : 0.0, exposed, efficiency,
                  weak_2n, speedup_2n);
    log << ", path=" << exchange.path << " (" << config.allreduce << "), overlap=" << (exchange.overlap ? "on" : "off")
        << " (" << config.overlap << "), buckets=" << (exchange.overlap ? exchange.overlap->plan().buckets.size() : 1)
        << line << '\n';
    if (!log) throw IoError(run_dir + "/scaling.log: write failed");
  }
  return exchange;
}

}  // namespace cnn
