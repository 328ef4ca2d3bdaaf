// NcclCommunicator: gradient allreduce between GPUs with NCCL, on the backend's stream.
#ifdef CNN_HAVE_NCCL

#include <nccl.h>

#include <string>
#include <vector>

#include "cnn/mpi_check.hpp"
#include "cuda_check.hpp"
#include "device_communicators.hpp"

namespace cnn::cuda {
namespace {

class NcclCommunicator final : public StreamCommunicator {
 public:
  NcclCommunicator(const MpiWorld& world, DeviceBackend& backend) : StreamCommunicator(world, backend) {
    // Rank 0 makes the id; every rank needs the same one before ncclCommInitRank, which blocks until
    // all ranks have joined.
    ncclUniqueId id{};
    if (world.rank() == 0) CNN_CHECK_NCCL(ncclGetUniqueId(&id));
    CNN_CHECK_MPI(MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, world.comm()));
    CNN_CHECK_CUDA(cudaSetDevice(backend.device()));
    CNN_CHECK_NCCL(ncclCommInitRank(&comm_, world.size(), id, world.rank()));
    int version = 0;
    CNN_CHECK_NCCL(ncclGetVersion(&version));
    name_ = "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
            std::to_string(version % 100) + " (device memory)";
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator() override {
    if (comm_stream_ != nullptr) (void)cudaStreamSynchronize(comm_stream_);
    if (comm_ != nullptr) (void)ncclCommDestroy(comm_);  // cannot throw from here
    for (cudaEvent_t e : fork_events_) (void)cudaEventDestroy(e);
    for (Probe& p : probes_)
      for (cudaEvent_t e : p.events) (void)cudaEventDestroy(e);
    for (cudaEvent_t e : join_) (void)cudaEventDestroy(e);
    if (comm_stream_ != nullptr) (void)cudaStreamDestroy(comm_stream_);
  }

  // Destroy after every CUDA graph that captured this communicator's collectives (the backend's
  // overlapped step graphs): ncclCommDestroy waits until those graphs are gone.
  //
  // The overlapped step: each bucket's allreduce goes on a second stream once the backend's stream
  // has reached the point where the bucket is final (an event), and the backend's stream waits for
  // the second one at wait_all (another event). Only stream work: it is captured into the backend's
  // CUDA graph (fork and join through events, as stream capture requires). Steps queued eagerly
  // (not captured) are timed with events: comm from the first allreduce's start to the last one's
  // end on the second stream; exposed from the end of the compute to the end of the join.
  bool stream_ordered() const override { return true; }

  void start_allreduce_sum(float* data, std::int64_t count) override {
    if (world_.size() == 1 || count == 0) return;
    ensure_comm_stream();
    if (starts_ == 0) probing_ = !capturing();
    if (static_cast<std::size_t>(starts_) >= fork_events_.size()) {
      cudaEvent_t e = nullptr;
      CNN_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      fork_events_.push_back(e);
    }
    cudaEvent_t ready = fork_events_[static_cast<std::size_t>(starts_)];
    CNN_CHECK_CUDA(cudaEventRecord(ready, stream_));
    CNN_CHECK_CUDA(cudaStreamWaitEvent(comm_stream_, ready, 0));
    if (probing_ && starts_ == 0) CNN_CHECK_CUDA(cudaEventRecord(probe().events[0], comm_stream_));
    CNN_CHECK_NCCL(ncclAllReduce(data, data, static_cast<std::size_t>(count), ncclFloat, ncclSum, comm_, comm_stream_));
    ++starts_;
  }

  void wait_all() override {
    if (starts_ == 0) return;
    if (probing_) {
      Probe& p = probe();
      CNN_CHECK_CUDA(cudaEventRecord(p.events[1], comm_stream_));  // comm end
      CNN_CHECK_CUDA(cudaEventRecord(p.events[2], stream_));       // compute end
    }
    CNN_CHECK_CUDA(cudaEventRecord(join_[0], comm_stream_));
    CNN_CHECK_CUDA(cudaStreamWaitEvent(stream_, join_[0], 0));
    if (probing_) {
      CNN_CHECK_CUDA(cudaEventRecord(probe().events[3], stream_));  // join done
      probe().used = true;
      ++probe_next_;
    }
    starts_ = 0;
    probing_ = false;
  }

  AsyncAllreduceTimes take_async_times() override {
    AsyncAllreduceTimes t;
    for (std::size_t i = 0; i < probe_next_ && i < probes_.size(); ++i) {
      Probe& p = probes_[i];
      if (!p.used) continue;
      CNN_CHECK_CUDA(cudaEventSynchronize(p.events[3]));
      t.comm_seconds += seconds_between(p.events[0], p.events[1]);
      t.exposed_seconds += seconds_between(p.events[2], p.events[3]);
      t.steps += 1;
      p.used = false;
    }
    probe_next_ = 0;
    return t;
  }

  std::string name() const override { return name_; }

  void allreduce_sum(float* data, std::int64_t count) override {
    if (world_.size() == 1 || count == 0) return;  // the sum over one rank is the buffer itself
    CNN_CHECK_NCCL(ncclAllReduce(data, data, static_cast<std::size_t>(count), ncclFloat, ncclSum, comm_, stream_));
  }

  void broadcast(float* data, std::int64_t count, int root) override {
    if (world_.size() == 1 || count == 0) return;
    CNN_CHECK_NCCL(ncclBroadcast(data, data, static_cast<std::size_t>(count), ncclFloat, root, comm_, stream_));
  }

 private:
  struct Probe {
    cudaEvent_t events[4] = {nullptr, nullptr, nullptr, nullptr};  // comm start, comm end, compute end, join
    bool used = false;
  };
  // Probes are kept until take_async_times() (once per epoch); beyond this many, the oldest is reused.
  static constexpr std::size_t kMaxProbes = 64;

  static double seconds_between(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0.0f;
    CNN_CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    return static_cast<double>(ms) * 1e-3;
  }

  bool capturing() const {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CNN_CHECK_CUDA(cudaStreamIsCapturing(stream_, &status));
    return status != cudaStreamCaptureStatusNone;
  }

  void ensure_comm_stream() {
    if (comm_stream_ != nullptr) return;
    int device = 0;
    CNN_CHECK_CUDA(cudaGetDevice(&device));
    CNN_CHECK_CUDA(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    CNN_CHECK_CUDA(cudaEventCreateWithFlags(&join_[0], cudaEventDisableTiming));
  }

  Probe& probe() {
    if (probe_next_ >= kMaxProbes) probe_next_ = 0;
    while (probes_.size() <= probe_next_) {
      Probe p;
      for (cudaEvent_t& e : p.events) CNN_CHECK_CUDA(cudaEventCreate(&e));
      probes_.push_back(p);
    }
    return probes_[probe_next_];
  }

  ncclComm_t comm_ = nullptr;
  std::string name_;
  cudaStream_t comm_stream_ = nullptr;
  std::vector<cudaEvent_t> fork_events_;
  cudaEvent_t join_[1] = {nullptr};
  std::vector<Probe> probes_;
  std::size_t probe_next_ = 0;
  int starts_ = 0;
  bool probing_ = false;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const MpiWorld& world, DeviceBackend& backend) {
  return std::make_unique<NcclCommunicator>(world, backend);
}

}  // namespace cnn::cuda

#endif  // CNN_HAVE_NCCL
