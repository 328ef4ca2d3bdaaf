// The peer allreduce (kernels/dist/peer_allreduce.cuh) under mpiexec, one rank per GPU, run by
// gpu_peer_allreduce_test.sh with 2 ranks (and 4 where there are 4 GPUs). Every result must equal,
// BITWISE, the fp32 sum of every rank's input in rank order 0, 1, ..., n-1, which each rank
// recomputes on the host from the same seeds. Inputs span six decades, so another order would
// change the bits. Covered: sizes that are not whole float4s, sub-ranges at unaligned addresses
// (the scalar kernel), many allreduces in a row (the epochs and alternating staging slots),
// different sizes one after another, the overlapped API on a second stream, CUDA graph replays of
// a captured allreduce with new inputs each time, and broadcast.
// Exits 77 (skipped) on every rank when there are fewer GPUs than ranks or no peer access.
#define BOOST_TEST_MODULE gpu_mpi_peer_allreduce
#include <cuda_runtime.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "boost_test.hpp"
#include "cnn/communicator.hpp"
#include "cnn/cuda_backend.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/dist/device_communicators.hpp"

namespace {

constexpr std::int64_t kCapacity = 1 << 20;  // floats: 4 MB, beyond the seed model's 1.47 MB at d=256

struct PeerFixture {
  PeerFixture() {
    auto& suite = boost::unit_test::framework::master_test_suite();
    world = std::make_unique<cnn::MpiWorld>(&suite.argc, &suite.argv);
    std::string skip;
    const int gpus = cnn::cuda_device_count();
    if (world->size() < 2) skip = "needs 2 or more ranks (run it with mpiexec)";
    else if (gpus < world->size()) skip = std::to_string(world->size()) + " ranks need as many GPUs; " + std::to_string(gpus) + " visible";
    const int skip_anywhere = world->allreduce_max(skip.empty() ? 0 : 1);
    if (skip_anywhere == 0) {
      device = world->local_rank() % gpus;
      CNN_CHECK_CUDA(cudaSetDevice(device));
      skip = cnn::cuda::peer_allreduce_unavailable(*world, device);
    }
    if (skip_anywhere != 0 || !skip.empty()) {
      if (world->rank() == 0) std::printf("SKIP: gpu_mpi_peer_allreduce: %s\n", skip.empty() ? "a rank cannot run" : skip.c_str());
      std::fflush(stdout);
      world.reset();  // MPI_Finalize on every rank before leaving
      std::exit(77);
    }
    CNN_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    comm = cnn::cuda::make_peer_communicator(*world, device, stream, kCapacity);
  }
  ~PeerFixture() {
    comm.reset();
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
    world.reset();
  }
  static std::unique_ptr<cnn::MpiWorld> world;
  static std::unique_ptr<cnn::Communicator> comm;
  static cudaStream_t stream;
  static int device;
};
std::unique_ptr<cnn::MpiWorld> PeerFixture::world;
std::unique_ptr<cnn::Communicator> PeerFixture::comm;
cudaStream_t PeerFixture::stream = nullptr;
int PeerFixture::device = 0;
BOOST_TEST_GLOBAL_FIXTURE(PeerFixture);

// Rank `rank`'s input for round `round`: signs and six decades of magnitude, so the order of the sum
// shows in the bits.
std::vector<float> input(int rank, int round, std::int64_t count) {
  std::mt19937 rng(static_cast<std::uint32_t>(1000003 * round + 7919 * rank + count));
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> decade(-3, 2);
  std::vector<float> v(static_cast<std::size_t>(count));
  for (float& x : v) x = mantissa(rng) * std::pow(10.0f, static_cast<float>(decade(rng)));
  return v;
}

std::vector<float> sum_in_rank_order(int ranks, int round, std::int64_t count) {
  std::vector<float> sum = input(0, round, count);
  for (int q = 1; q < ranks; ++q) {
    const std::vector<float> x = input(q, round, count);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += x[i];
  }
  return sum;
}

// Elements whose bits differ from the expected sum, summed over ranks (every rank gets the count).
std::int64_t mismatches(const std::vector<float>& got, const std::vector<float>& want) {
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) bad += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
  std::int64_t all = bad;
  PeerFixture::world->allreduce_sum(&all, 1);
  return all;
}

void upload(float* device_ptr, const std::vector<float>& host) {
  CNN_CHECK_CUDA(cudaMemcpyAsync(device_ptr, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, PeerFixture::stream));
}
std::vector<float> download(const float* device_ptr, std::int64_t count) {
  std::vector<float> host(static_cast<std::size_t>(count));
  CNN_CHECK_CUDA(cudaMemcpyAsync(host.data(), device_ptr, host.size() * sizeof(float), cudaMemcpyDeviceToHost, PeerFixture::stream));
  CNN_CHECK_CUDA(cudaStreamSynchronize(PeerFixture::stream));
  return host;
}

}  // namespace

BOOST_AUTO_TEST_CASE(sums_equal_the_rank_order_sum_bitwise) {
  auto& world = *PeerFixture::world;
  cnn::cuda::DeviceBuffer<float> buffer(kCapacity);
  int round = 0;
  // Whole buffers (float4 kernel) of awkward sizes, then sub-ranges one float in (scalar kernel).
  for (int offset : {0, 1}) {
    for (std::int64_t count : {std::int64_t{1}, std::int64_t{3}, std::int64_t{4}, std::int64_t{5}, std::int64_t{127},
                               std::int64_t{4099}, std::int64_t{92170}, std::int64_t{368650}, kCapacity - offset}) {
      ++round;
      upload(buffer.get() + offset, input(world.rank(), round, count));
      PeerFixture::comm->allreduce_sum(buffer.get() + offset, count);
      const std::int64_t bad = mismatches(download(buffer.get() + offset, count), sum_in_rank_order(world.size(), round, count));
      BOOST_TEST(bad == 0, "offset " << offset << ", " << count << " floats: " << bad << " elements differ");
    }
  }
}

BOOST_AUTO_TEST_CASE(many_in_a_row_then_overlapped_buckets) {
  auto& world = *PeerFixture::world;
  const std::int64_t count = 368650;  // the seed model's gradient at d=256 (plus a partial float4)
  cnn::cuda::DeviceBuffer<float> buffer(count);
  // 50 allreduces back to back, checked only at the end: each round's result feeds the next.
  std::vector<float> want = input(world.rank(), 500, count);
  upload(buffer.get(), want);
  for (int r = 0; r < 50; ++r) PeerFixture::comm->allreduce_sum(buffer.get(), count);
  // After the first, every rank holds the same values, and their sum in rank order is x + x + ...
  want = sum_in_rank_order(world.size(), 500, count);
  for (int r = 1; r < 50; ++r)
    for (float& x : want) {
      float s = x;
      for (int q = 1; q < world.size(); ++q) s += x;
      x = s;
    }
  BOOST_TEST(mismatches(download(buffer.get(), count), want) == 0);

  // The overlapped API: two buckets started on the second stream, joined at wait_all.
  const std::int64_t cut = 92160;
  upload(buffer.get(), input(world.rank(), 501, count));
  PeerFixture::comm->start_allreduce_sum(buffer.get() + cut, count - cut);
  PeerFixture::comm->start_allreduce_sum(buffer.get(), cut);
  PeerFixture::comm->wait_all();
  BOOST_TEST(mismatches(download(buffer.get(), count), sum_in_rank_order(world.size(), 501, count)) == 0);
}

BOOST_AUTO_TEST_CASE(graph_replays_use_fresh_epochs) {
  auto& world = *PeerFixture::world;
  const std::int64_t count = 92170;
  cnn::cuda::DeviceBuffer<float> buffer(count);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CNN_CHECK_CUDA(cudaStreamBeginCapture(PeerFixture::stream, cudaStreamCaptureModeThreadLocal));
  PeerFixture::comm->allreduce_sum(buffer.get(), count);
  CNN_CHECK_CUDA(cudaStreamEndCapture(PeerFixture::stream, &graph));
  CNN_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int round = 600; round < 610; ++round) {
    upload(buffer.get(), input(world.rank(), round, count));
    CNN_CHECK_CUDA(cudaGraphLaunch(exec, PeerFixture::stream));
    const std::int64_t bad = mismatches(download(buffer.get(), count), sum_in_rank_order(world.size(), round, count));
    BOOST_TEST(bad == 0, "replay " << round - 600 << ": " << bad << " elements differ");
  }
  CNN_CHECK_CUDA(cudaGraphExecDestroy(exec));
  CNN_CHECK_CUDA(cudaGraphDestroy(graph));
}

BOOST_AUTO_TEST_CASE(broadcast_copies_the_root) {
  auto& world = *PeerFixture::world;
  const std::int64_t count = 4099;
  const int root = world.size() - 1;
  cnn::cuda::DeviceBuffer<float> buffer(count);
  upload(buffer.get(), input(world.rank(), 700, count));
  PeerFixture::comm->broadcast(buffer.get(), count, root);
  BOOST_TEST(mismatches(download(buffer.get(), count), input(root, 700, count)) == 0);
}

// Not run by default (--run_test=measure_allreduce_time; kernels/bench): microseconds per allreduce,
// 200 back to back on the stream after 20 warm-ups, slowest rank, for one-shot, two-shot, the
// variant chosen at set-up, and NCCL, at the seed model's gradient sizes (conv part at d=64, whole
// buffer at d=64 and d=256). CNN_PEER_BLOCKS sets the peer kernels' grid.
BOOST_AUTO_TEST_CASE(measure_allreduce_time, *boost::unit_test::disabled()) {
  auto& world = *PeerFixture::world;
  const std::int64_t sizes[] = {1664, 93834, 375306};
  cnn::cuda::DeviceBuffer<float> buffer(kCapacity);
  CNN_CHECK_CUDA(cudaMemsetAsync(buffer.get(), 0, kCapacity * sizeof(float), PeerFixture::stream));
  struct Path {
    std::string name;
    std::unique_ptr<cnn::Communicator> comm;
  };
  std::vector<Path> paths;
  paths.push_back({"one-shot", cnn::cuda::make_peer_communicator(world, PeerFixture::device, PeerFixture::stream, kCapacity, 1)});
  paths.push_back({"two-shot", cnn::cuda::make_peer_communicator(world, PeerFixture::device, PeerFixture::stream, kCapacity, 2)});
  paths.push_back({"chosen", cnn::cuda::make_peer_communicator(world, PeerFixture::device, PeerFixture::stream, 375306, 0)});
#ifdef CNN_HAVE_NCCL
  paths.push_back({"nccl", cnn::cuda::make_nccl_communicator(world, PeerFixture::device, PeerFixture::stream)});
#endif
  cudaEvent_t start = nullptr, stop = nullptr;
  CNN_CHECK_CUDA(cudaEventCreate(&start));
  CNN_CHECK_CUDA(cudaEventCreate(&stop));
  const char* blocks = std::getenv("CNN_PEER_BLOCKS");
  for (Path& p : paths) {
    std::string line = p.name + ":";
    for (std::int64_t count : sizes) {
      for (int r = 0; r < 20; ++r) p.comm->allreduce_sum(buffer.get(), count);
      CNN_CHECK_CUDA(cudaEventRecord(start, PeerFixture::stream));
      for (int r = 0; r < 200; ++r) p.comm->allreduce_sum(buffer.get(), count);
      CNN_CHECK_CUDA(cudaEventRecord(stop, PeerFixture::stream));
      CNN_CHECK_CUDA(cudaEventSynchronize(stop));
      float ms = 0.0f;
      CNN_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
      const double us = world.allreduce_max(1e3 * static_cast<double>(ms) / 200.0);
      char cell[64];
      std::snprintf(cell, sizeof(cell), " %lld floats %.1f us;", static_cast<long long>(count), us);
      line += cell;
    }
    if (world.rank() == 0)
      std::printf("measure_allreduce_time, %d ranks, blocks %s: %s (%s)\n", world.size(), blocks ? blocks : "default",
                  line.c_str(), p.comm->name().c_str());
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
}
