#include "cnn/communicator.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>

#include "cnn/flight_recorder.hpp"
#include "cnn/flight_site.hpp"
#include "cnn/mpi_check.hpp"
#include "cnn/peer_probe.hpp"

#ifdef CNN_HAVE_CUDA
#include "cnn/cuda_backend.hpp"
#endif

namespace cnn {

namespace {
// MPI counts are int; larger buffers go in chunks of this many elements.
constexpr std::int64_t kMaxMpiCount = INT_MAX / 2;
}  // namespace

MpiWorld::MpiWorld(int* argc, char*** argv) {
  int provided = 0;
  // FUNNELED: OpenMP threads compute, only the main thread calls MPI.
  CNN_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  thread_level_ = provided;  // the overlapped CPU step only calls MPI_Testall from a region at FUNNELED or above
  CNN_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  CNN_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  CNN_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  // Ranks that share memory share a node; the local rank picks the GPU.
  recorded_collective(CollectiveOp::kCommSplit, 0, [&] {
    CNN_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_comm_));
  });
  CNN_CHECK_MPI(MPI_Comm_rank(local_comm_, &local_rank_));
  CNN_CHECK_MPI(MPI_Comm_size(local_comm_, &local_size_));
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  CNN_CHECK_MPI(MPI_Get_processor_name(name, &length));
  host_.assign(name, static_cast<std::size_t>(length));
}

MpiWorld::~MpiWorld() {
  if (local_comm_ != MPI_COMM_NULL) MPI_Comm_free(&local_comm_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiWorld::barrier() const {
  recorded_collective(CollectiveOp::kBarrier, 0, [&] { CNN_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD)); });
}

void MpiWorld::allreduce_sum(double* values, int count) const {
  recorded_collective(CollectiveOp::kAllreduce, count * std::int64_t{sizeof(double)}, [&] {
    CNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  });
}

void MpiWorld::allreduce_sum(std::int64_t* values, int count) const {
  recorded_collective(CollectiveOp::kAllreduce, count * std::int64_t{sizeof(std::int64_t)}, [&] {
    CNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
  });
}

double MpiWorld::allreduce_max(double value) const {
  recorded_collective(CollectiveOp::kAllreduce, sizeof(double), [&] {
    CNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  });
  return value;
}

double MpiWorld::allreduce_min(double value) const {
  recorded_collective(CollectiveOp::kAllreduce, sizeof(double), [&] {
    CNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD));
  });
  return value;
}

int MpiWorld::allreduce_max(int value) const {
  recorded_collective(CollectiveOp::kAllreduce, sizeof(int), [&] {
    CNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  });
  return value;
}

int MpiWorld::allreduce_min(int value) const {
  recorded_collective(CollectiveOp::kAllreduce, sizeof(int), [&] {
    CNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  });
  return value;
}

void MpiWorld::broadcast(void* data, std::int64_t bytes, int root) const {
  auto* p = static_cast<char*>(data);
  recorded_collective(CollectiveOp::kBroadcast, bytes, [&] {
    for (std::int64_t done = 0; done < bytes; done += kMaxMpiCount) {
      const auto chunk = static_cast<int>(std::min(kMaxMpiCount, bytes - done));
      CNN_CHECK_MPI(MPI_Bcast(p + done, chunk, MPI_BYTE, root, MPI_COMM_WORLD));
    }
  });
}

std::string MpiWorld::broadcast_string(const std::string& value, int root) const {
  std::int64_t length = static_cast<std::int64_t>(value.size());
  broadcast(&length, sizeof(length), root);
  std::string result = rank_ == root ? value : std::string(static_cast<std::size_t>(length), '\0');
  broadcast(result.data(), length, root);
  return result;
}

std::vector<double> MpiWorld::gather_to_root(double value) const {
  std::vector<double> all(rank_ == 0 ? static_cast<std::size_t>(size_) : 0);
  recorded_collective(CollectiveOp::kGather, sizeof(double), [&] {
    CNN_CHECK_MPI(MPI_Gather(&value, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  });
  return all;
}

void MpiWorld::abort(int exit_code) const {
  // This rank has printed the line that explains the job's end: the others must not add a lost-peer
  // line of their own when the launcher tears them down (peer_probe.hpp).
  if (const PeerProbe* peers = PeerProbe::active()) peers->announce_end();
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  _exit(exit_code);  // MPI_Abort should not return; never continue if it does
}

void Communicator::allreduce_sum_doubles(double* data, std::int64_t count) {
  std::vector<float> rounded(data, data + count);
  allreduce_sum(rounded.data(), count);
  std::copy(rounded.begin(), rounded.end(), data);
}

void MpiCommunicator::allreduce_sum_doubles(double* data, std::int64_t count) {
  recorded_collective(CollectiveOp::kAllreduce, count * std::int64_t{sizeof(double)}, [&] {
    for (std::int64_t done = 0; done < count; done += kMaxMpiCount) {
      const auto chunk = static_cast<int>(std::min(kMaxMpiCount, count - done));
      CNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, data + done, chunk, MPI_DOUBLE, MPI_SUM, world_.comm()));
    }
  });
}

void MpiCommunicator::allreduce_sum(float* data, std::int64_t count) {
  recorded_collective(CollectiveOp::kAllreduce, count * std::int64_t{sizeof(float)}, [&] {
    for (std::int64_t done = 0; done < count; done += kMaxMpiCount) {
      const auto chunk = static_cast<int>(std::min(kMaxMpiCount, count - done));
      CNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, data + done, chunk, MPI_FLOAT, MPI_SUM, world_.comm()));
    }
  });
}

// Each started range is one flight record, in flight until wait_all() (its end then) or a failure.
void MpiCommunicator::start_allreduce_sum(float* data, std::int64_t count) {
  if (first_start_ < 0.0) first_start_ = wall_seconds();
  completed_at_ = -1.0;
  const std::uint64_t seq = flight_begin(CollectiveOp::kIallreduce, count * std::int64_t{sizeof(float)});
  started_.push_back(seq);
  try {
    for (std::int64_t done = 0; done < count; done += kMaxMpiCount) {
      const auto chunk = static_cast<int>(std::min(kMaxMpiCount, count - done));
      MPI_Request request = MPI_REQUEST_NULL;
      CNN_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, data + done, chunk, MPI_FLOAT, MPI_SUM, world_.comm(), &request));
      pending_.push_back(request);
    }
  } catch (const std::exception& e) {
    flight_failed(seq, e.what());
    throw;
  }
}

void MpiCommunicator::progress() {
  if (pending_.empty() || completed_at_ >= 0.0 || world_.thread_level() < MPI_THREAD_FUNNELED) return;
  int done = 0;
  CNN_CHECK_MPI(MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE));
  if (done) completed_at_ = wall_seconds();
}

void MpiCommunicator::wait_all() {
  if (first_start_ < 0.0) return;
  const double wait_start = wall_seconds();
  if (!pending_.empty()) {
    try {
      CNN_CHECK_MPI(MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE));
    } catch (const std::exception& e) {
      for (const std::uint64_t seq : started_) flight_end(seq, CallStatus::kFailed);
      write_flight_record_now(std::string("MPI_Waitall of the started allreduces failed: ") + e.what());
      throw;
    }
  }
  const double wait_end = wall_seconds();
  for (const std::uint64_t seq : started_) flight_end(seq);
  started_.clear();
  pending_.clear();
  times_.comm_seconds += (completed_at_ >= 0.0 ? completed_at_ : wait_end) - first_start_;
  times_.exposed_seconds += wait_end - wait_start;
  times_.steps += 1;
  first_start_ = -1.0;
  completed_at_ = -1.0;
}

AsyncAllreduceTimes MpiCommunicator::take_async_times() {
  const AsyncAllreduceTimes t = times_;
  times_ = {};
  return t;
}

void MpiCommunicator::broadcast(float* data, std::int64_t count, int root) {
  world_.broadcast(data, count * static_cast<std::int64_t>(sizeof(float)), root);
}

std::unique_ptr<Communicator> make_communicator(const MpiWorld& world, Backend& backend, AllreducePath allreduce,
                                                std::optional<int> peer_blocks) {
  if (world.size() == 1) return std::make_unique<SingleRankCommunicator>(backend.memory_space());
  if (backend.memory_space() == MemorySpace::kHost) return std::make_unique<MpiCommunicator>(world);
#ifdef CNN_HAVE_CUDA
  return make_device_communicator(world, backend, device_allreduce_path(allreduce), peer_blocks);
#else
  (void)allreduce;
  (void)peer_blocks;
  throw Error(ExitCode::kFailure, "a device-memory backend in a build without CUDA");
#endif
}

}  // namespace cnn
