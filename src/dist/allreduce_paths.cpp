// The advisor's pieces 2 and 3: which allreduce path, and what it costs (exchange_calibration.hpp).
#include <algorithm>

#include "cnn/errors.hpp"
#include "cnn/exchange_calibration.hpp"

#ifdef CNN_HAVE_CUDA
#include "cnn/cuda_backend.hpp"
#endif

namespace cnn {
namespace {

// The communicators to time, in the order they are reported. Collective (the device communicators
// and the peer check are).
std::vector<TimedPath> candidate_paths(const CalibrationHarness& harness, AllreducePath requested,
                                       std::unique_ptr<Communicator> given, std::optional<int> peer_blocks) {
  std::vector<TimedPath> paths;
  if (harness.backend().memory_space() == MemorySpace::kHost) {
    paths.push_back({allreduce_name(AllreducePath::kMpi), std::move(given), 0.0});
    return paths;
  }
#ifdef CNN_HAVE_CUDA
  const AllreducePath given_path = device_allreduce_path(requested);  // the path of `given`
  std::vector<AllreducePath> candidates;
  if (requested != AllreducePath::kAuto) {
    candidates = {requested};
  } else {
    if (device_nccl_available()) candidates.push_back(AllreducePath::kNccl);
    // Collective, like the communicators made below: every rank reaches it.
    if (device_peer_unavailable(harness.world(), harness.backend()).empty()) candidates.push_back(AllreducePath::kPeer);
    candidates.push_back(AllreducePath::kMpi);
  }
  for (AllreducePath path : candidates)
    paths.push_back({allreduce_name(path),
                     path == given_path && given
                         ? std::move(given)
                         : make_device_communicator(harness.world(), harness.backend(), path, peer_blocks),
                     0.0});
  return paths;
#else
  (void)requested;
  (void)peer_blocks;
  throw Error(ExitCode::kFailure, "internal error: device memory in a build without CUDA");
#endif
}

}  // namespace

TimedPaths time_allreduce_paths(const CalibrationHarness& harness, AllreducePath requested,
                                std::unique_ptr<Communicator> given, std::optional<int> peer_blocks) {
  TimedPaths timed;
  timed.paths = candidate_paths(harness, requested, std::move(given), peer_blocks);
  for (TimedPath& p : timed.paths)
    p.seconds = harness.time([&] { p.comm->allreduce_sum(harness.grads(), harness.param_count()); });
  int chosen = 0;
  for (int i = 1; i < static_cast<int>(timed.paths.size()); ++i)
    if (timed.paths[static_cast<std::size_t>(i)].seconds < timed.paths[static_cast<std::size_t>(chosen)].seconds)
      chosen = i;
  harness.world().broadcast(&chosen, sizeof(chosen));  // rank 0's choice: every rank must use the same path
  timed.chosen = static_cast<std::size_t>(chosen);
  timed.comm = std::move(timed.paths[timed.chosen].comm);
  return timed;
}

AllreduceCost measure_allreduce_cost(const CalibrationHarness& harness, Communicator& comm, double full_seconds) {
  const std::int64_t total = harness.param_count();
  std::vector<double> sizes, seconds;
  for (std::int64_t count : {std::max<std::int64_t>(total / 64, 1), std::max<std::int64_t>(total / 8, 1)}) {
    sizes.push_back(static_cast<double>(count) * sizeof(float));
    seconds.push_back(harness.time([&] { comm.allreduce_sum(harness.grads(), count); }));
  }
  sizes.push_back(static_cast<double>(total) * sizeof(float));
  seconds.push_back(full_seconds);
  return fit_allreduce_cost(sizes, seconds);
}

}  // namespace cnn
