// SideStreamCommunicator: the overlapped step's allreduces on a second stream, forked from and joined
// back to the backend's stream with events (what stream capture requires), so the whole step,
// communication included, can be one CUDA graph; a step's only allreduce, when it starts after the
// whole backward, on the backend's stream itself; and the event probes that time the steps queued
// eagerly. Shared by the NCCL and the peer communicators, which only say how to queue one allreduce.
#include "cnn/flight_recorder.hpp"
#include "cuda/cuda_check.hpp"
#include "dist/device_communicators.hpp"

namespace cnn::cuda {

SideStreamCommunicator::~SideStreamCommunicator() {
  drain();
  for (cudaEvent_t e : fork_events_) (void)cudaEventDestroy(e);
  for (Probe& p : probes_)
    for (cudaEvent_t e : p.events) (void)cudaEventDestroy(e);
  if (join_ != nullptr) (void)cudaEventDestroy(join_);
  if (comm_stream_ != nullptr) (void)cudaStreamDestroy(comm_stream_);
}

void SideStreamCommunicator::drain() noexcept {
  if (comm_stream_ != nullptr) (void)cudaStreamSynchronize(comm_stream_);
}

void SideStreamCommunicator::allreduce_sum(float* data, std::int64_t count) {
  if (world_.size() == 1 || count == 0) return;  // the sum over one rank is the buffer itself
  queue_recorded(data, count, stream_);
}

// Every allreduce this communicator queues is one flight record (flight_recorder.hpp); one queued
// while a step graph is captured is recorded at each replay of that graph instead (step_graph.cu).
void SideStreamCommunicator::queue_recorded(float* data, std::int64_t count, cudaStream_t stream) {
  recorded_queued_collective(CollectiveOp::kDeviceAllreduce, count * static_cast<std::int64_t>(sizeof(float)),
                             [&] { queue_allreduce(data, count, stream); });
}

// Each bucket's allreduce goes on the second stream once the backend's stream has reached the point
// where the bucket is final (an event); the backend's stream waits for the second one at wait_all
// (another event). Steps queued eagerly (not captured) are timed with events: comm from the first
// allreduce's start to the last one's end on the second stream; exposed from the end of the compute
// to the end of the join.
void SideStreamCommunicator::start_allreduce_sum(float* data, std::int64_t count) {
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
  queue_recorded(data, count, comm_stream_);
  ++starts_;
}

// Nothing of this step on the second stream: the backend's stream has nothing left to compute, so
// the allreduce goes there, after the backward, with no fork or join (two fewer dependencies in a
// captured step, and a kernel that may launch as a dependent of the one before). Otherwise after
// the earlier buckets on the second stream: a communicator runs one allreduce at a time.
void SideStreamCommunicator::finish_allreduce_sum(float* data, std::int64_t count) {
  if (world_.size() == 1 || count == 0) return;
  if (starts_ > 0) {
    start_allreduce_sum(data, count);
    return;
  }
  if (capturing()) {
    queue_recorded(data, count, stream_);
    return;
  }
  Probe& p = probe();  // compute end = comm start, and comm end = join: all of it exposed
  CNN_CHECK_CUDA(cudaEventRecord(p.events[2], stream_));
  CNN_CHECK_CUDA(cudaEventRecord(p.events[0], stream_));
  queue_recorded(data, count, stream_);
  CNN_CHECK_CUDA(cudaEventRecord(p.events[1], stream_));
  CNN_CHECK_CUDA(cudaEventRecord(p.events[3], stream_));
  p.used = true;
  ++probe_next_;
}

void SideStreamCommunicator::wait_all() {
  if (starts_ == 0) return;
  if (probing_) {
    Probe& p = probe();
    CNN_CHECK_CUDA(cudaEventRecord(p.events[1], comm_stream_));  // comm end
    CNN_CHECK_CUDA(cudaEventRecord(p.events[2], stream_));       // compute end
  }
  CNN_CHECK_CUDA(cudaEventRecord(join_, comm_stream_));
  CNN_CHECK_CUDA(cudaStreamWaitEvent(stream_, join_, 0));
  if (probing_) {
    CNN_CHECK_CUDA(cudaEventRecord(probe().events[3], stream_));  // join done
    probe().used = true;
    ++probe_next_;
  }
  starts_ = 0;
  probing_ = false;
}

AsyncAllreduceTimes SideStreamCommunicator::take_async_times() {
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

double SideStreamCommunicator::seconds_between(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0.0f;
  CNN_CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
  return static_cast<double>(ms) * 1e-3;
}

bool SideStreamCommunicator::capturing() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CNN_CHECK_CUDA(cudaStreamIsCapturing(stream_, &status));
  return status != cudaStreamCaptureStatusNone;
}

void SideStreamCommunicator::ensure_comm_stream() {
  if (comm_stream_ != nullptr) return;
  CNN_CHECK_CUDA(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
  CNN_CHECK_CUDA(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
}

SideStreamCommunicator::Probe& SideStreamCommunicator::probe() {
  if (probe_next_ >= kMaxProbes) probe_next_ = 0;
  while (probes_.size() <= probe_next_) {
    Probe p;
    for (cudaEvent_t& e : p.events) CNN_CHECK_CUDA(cudaEventCreate(&e));
    probes_.push_back(p);
  }
  return probes_[probe_next_];
}

}  // namespace cnn::cuda
