// Collective communication between ranks.
//
// MpiWorld owns MPI's lifetime and the host-side collectives the trainer needs for bookkeeping
// (stats, timings, agreement on errors). A Communicator moves the gradient buffer: MpiCommunicator
// on host memory, NcclCommunicator (kernels/) on device memory.
// Every collective call of either is recorded by the flight recorder (flight_recorder.hpp).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cnn/backend.hpp"
#include "cnn/choices.hpp"

namespace cnn {

class MpiWorld {
 public:
  // MPI_Init_thread; works without mpirun (a singleton world of one rank). Sets MPI_ERRORS_RETURN on
  // the world so failures reach CNN_CHECK_MPI, and splits a node-local communicator
  // (MPI_COMM_TYPE_SHARED) for local_rank().
  MpiWorld(int* argc, char*** argv);
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }
  // What MPI_Init_thread provided (MPI_THREAD_SINGLE .. MPI_THREAD_MULTIPLE).
  int thread_level() const { return thread_level_; }
  MPI_Comm comm() const { return MPI_COMM_WORLD; }

  void barrier() const;
  void allreduce_sum(double* values, int count) const;
  void allreduce_sum(std::int64_t* values, int count) const;
  double allreduce_max(double value) const;
  double allreduce_min(double value) const;
  int allreduce_max(int value) const;
  int allreduce_min(int value) const;
  void broadcast(void* data, std::int64_t bytes, int root = 0) const;
  std::string broadcast_string(const std::string& value, int root = 0) const;
  std::vector<double> gather_to_root(double value) const;  // size() values on rank 0, empty elsewhere

  // Stops every rank at once; for failures that only this rank saw.
  [[noreturn]] void abort(int exit_code) const;

 private:
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string host_;
  int thread_level_ = MPI_THREAD_SINGLE;
  MPI_Comm local_comm_ = MPI_COMM_NULL;
};

// The non-blocking allreduces of the steps since the last take_async_times(): per step, `comm` runs
// from the first start to the last completion and `exposed` is how long the step waited for them
// after its own compute had ended (wait_all). Overlap hid comm - exposed.
struct AsyncAllreduceTimes {
  double comm_seconds = 0.0;
  double exposed_seconds = 0.0;
  std::int64_t steps = 0;  // steps these sums cover (stream-ordered communicators sample some steps)
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;
  // Where the buffers passed below must live.
  virtual MemorySpace memory_space() const = 0;
  // In place: every rank ends with the elementwise sum over ranks.
  virtual void allreduce_sum(float* data, std::int64_t count) = 0;
  // The same in double, in memory_space() too (bn's per-channel statistics: a few values a step,
  // whose variance E[x^2] - mean^2 would lose digits in float). The default (host memory) rounds
  // through allreduce_sum; MPI and the device communicators sum in double.
  virtual void allreduce_sum_doubles(double* data, std::int64_t count);
  // True when allreduce_sum_doubles only queues work on the backend's stream (NCCL), so that a step
  // holding it may be captured in a CUDA graph; false when it waits on the host (MPI, host staging).
  virtual bool stream_ordered_doubles() const { return false; }
  virtual void broadcast(float* data, std::int64_t count, int root) = 0;
  virtual void barrier() = 0;

  // Non-blocking allreduce (the overlapped step, gradient_overlap.hpp): starts the in-place sum over
  // ranks of [data, data + count); it is complete after wait_all() - on return for host memory, for
  // work queued after it when stream_ordered(). The defaults are the blocking allreduce_sum.
  virtual void start_allreduce_sum(float* data, std::int64_t count) { allreduce_sum(data, count); }
  // The same for a range started when the whole backward is done, with wait_all() next: there is
  // nothing left to overlap it with, so a stream-ordered communicator may queue it on the backend's
  // stream itself, where it needs no fork or join.
  virtual void finish_allreduce_sum(float* data, std::int64_t count) { start_allreduce_sum(data, count); }
  // Lets started reductions move on; cheap; from the thread that started them.
  virtual void progress() {}
  virtual void wait_all() {}
  // True when start/wait only queue work on the backend's stream (and may be captured in a graph).
  virtual bool stream_ordered() const { return false; }
  virtual AsyncAllreduceTimes take_async_times() { return {}; }

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
};

// MPI_Allreduce(MPI_SUM) on host memory.
class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(const MpiWorld& world) : world_(world) {}
  std::string name() const override { return "MPI_Allreduce (host memory)"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }
  void allreduce_sum(float* data, std::int64_t count) override;
  void allreduce_sum_doubles(double* data, std::int64_t count) override;  // MPI_DOUBLE
  void broadcast(float* data, std::int64_t count, int root) override;
  void barrier() override { world_.barrier(); }
  // MPI_Iallreduce; progress() is MPI_Testall (skipped below MPI_THREAD_FUNNELED, since it is called
  // inside an OpenMP region), wait_all() is MPI_Waitall. Timed on the host clock.
  void start_allreduce_sum(float* data, std::int64_t count) override;
  void progress() override;
  void wait_all() override;
  AsyncAllreduceTimes take_async_times() override;
  int rank() const override { return world_.rank(); }
  int size() const override { return world_.size(); }
  int local_rank() const override { return world_.local_rank(); }

 private:
  const MpiWorld& world_;
  std::vector<MPI_Request> pending_;
  std::vector<std::uint64_t> started_;  // their flight recorder numbers (flight_recorder.hpp)
  double first_start_ = -1.0;  // of this step's reductions; < 0: none started
  double completed_at_ = -1.0; // when progress() saw them all done; < 0: not yet
  AsyncAllreduceTimes times_;
};

// A world of one rank: nothing to reduce, so no library is set up (no NCCL communicator, no staging
// buffers). Works for either memory space.
class SingleRankCommunicator : public Communicator {
 public:
  explicit SingleRankCommunicator(MemorySpace space) : space_(space) {}
  std::string name() const override { return "none (a single rank)"; }
  MemorySpace memory_space() const override { return space_; }
  void allreduce_sum(float*, std::int64_t) override {}
  void allreduce_sum_doubles(double*, std::int64_t) override {}
  void broadcast(float*, std::int64_t, int) override {}
  void barrier() override {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }

 private:
  MemorySpace space_;
};

// The communicator that suits the world and the backend: none for a single rank; MPI for host
// memory; for device memory the path device_allreduce_path(allreduce) names (--allreduce: NCCL when
// built with it, MPI through host staging otherwise or when asked for). The choice is printed by the
// trainer.
// peer_blocks: the knob CNN_PEER_BLOCKS (knobs.hpp) for the peer path.
std::unique_ptr<Communicator> make_communicator(const MpiWorld& world, Backend& backend,
                                                AllreducePath allreduce = AllreducePath::kAuto,
                                                std::optional<int> peer_blocks = std::nullopt);

}  // namespace cnn
