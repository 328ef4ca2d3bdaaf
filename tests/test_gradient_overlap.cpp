// The overlap planner (gradient_overlap.hpp): the allreduce cost fit, the choice of buckets by
// predicted exposed time, and OverlapReducer starting each bucket when its last range is final.
#define BOOST_TEST_MODULE gradient_overlap
#include <string>

#include "boost_test.hpp"
#include "cnn/errors.hpp"
#include "cnn/gradient_overlap.hpp"

namespace {

// Layout of the seed model: conv [0, 100), fc [100, 1100); the fc gradients are final first.
std::vector<cnn::GradientReadyPoint> seed_points(double conv_seconds) {
  return {cnn::GradientReadyPoint{100, 1000, conv_seconds}, cnn::GradientReadyPoint{0, 100, 0.0}};
}

// Records start (S), finish (F: started with the whole backward done) and wait calls; reduces nothing.
class FakeCommunicator : public cnn::SingleRankCommunicator {
 public:
  FakeCommunicator() : cnn::SingleRankCommunicator(cnn::MemorySpace::kHost) {}
  void start_allreduce_sum(float* data, std::int64_t count) override {
    calls += "S" + std::to_string(data - base) + "+" + std::to_string(count) + " ";
  }
  void finish_allreduce_sum(float* data, std::int64_t count) override {
    calls += "F" + std::to_string(data - base) + "+" + std::to_string(count) + " ";
  }
  void wait_all() override { calls += "W"; }
  const float* base = nullptr;
  std::string calls;
};

}  // namespace

BOOST_AUTO_TEST_CASE(fit_recovers_latency_and_bandwidth) {
  // 10 us + bytes / 2 GB/s, exactly.
  const std::vector<double> bytes = {1e3, 1e5, 1e6};
  std::vector<double> seconds;
  for (double b : bytes) seconds.push_back(10e-6 + b / 2e9);
  const cnn::AllreduceCost cost = cnn::fit_allreduce_cost(bytes, seconds);
  BOOST_TEST(cost.latency_s == 10e-6, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(cost.seconds_per_byte == 0.5e-9, boost::test_tools::tolerance(1e-6));
  // One size: all latency; never negative terms.
  const cnn::AllreduceCost single = cnn::fit_allreduce_cost({1e3}, {5e-6});
  BOOST_TEST(single.latency_s == 5e-6, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(single.seconds_per_byte == 0.0);
  const cnn::AllreduceCost falling = cnn::fit_allreduce_cost({1e3, 1e6}, {9e-6, 1e-6});
  BOOST_TEST(falling.seconds_per_byte == 0.0);
  BOOST_TEST(falling.latency_s >= 0.0);
}

BOOST_AUTO_TEST_CASE(long_compute_after_the_fc_gradients_hides_their_allreduce) {
  // fc bucket: 10 us + 4000 B / 1 GB/s = 14 us, hidden under 1 ms of conv backward; the conv bucket
  // (10.4 us) is exposed. One bucket would expose 10 + 4.4 = 14.4 us.
  const cnn::AllreduceCost cost{10e-6, 1e-9};
  const cnn::BucketPlan plan = cnn::plan_buckets(seed_points(1e-3), 1100, cost);
  BOOST_TEST_REQUIRE(plan.buckets.size() == 2u);
  BOOST_TEST(plan.buckets[0].offset == 100);
  BOOST_TEST(plan.buckets[0].count == 1000);
  BOOST_TEST(plan.buckets[0].last_point == 0);
  BOOST_TEST(plan.buckets[1].offset == 0);
  BOOST_TEST(plan.buckets[1].count == 100);
  BOOST_TEST(plan.buckets[1].last_point == -1);
  BOOST_TEST(plan.predicted_exposed_s == 10.4e-6, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(plan.predicted_serial_s == 14.4e-6, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(plan.cuts == 1u);
}

BOOST_AUTO_TEST_CASE(short_compute_after_the_fc_gradients_keeps_one_bucket) {
  // 1 us of conv work hides almost nothing; a second allreduce would pay its latency again.
  const cnn::AllreduceCost cost{10e-6, 1e-9};
  const cnn::BucketPlan plan = cnn::plan_buckets(seed_points(1e-6), 1100, cost);
  BOOST_TEST_REQUIRE(plan.buckets.size() == 1u);
  BOOST_TEST(plan.buckets[0].offset == 0);
  BOOST_TEST(plan.buckets[0].count == 1100);
  BOOST_TEST(plan.predicted_exposed_s == plan.predicted_serial_s);
  BOOST_TEST(plan.cuts == 0u);
}

BOOST_AUTO_TEST_CASE(no_points_or_a_gap_gives_one_bucket) {
  const cnn::AllreduceCost cost{1e-6, 1e-9};
  BOOST_TEST(cnn::plan_buckets({}, 1100, cost).buckets.size() == 1u);
  // Ranges that do not cover the buffer: the planner does not guess.
  const std::vector<cnn::GradientReadyPoint> gap = {{100, 900, 1e-3}, {0, 100, 0.0}};
  BOOST_TEST(cnn::plan_buckets(gap, 1100, cost).buckets.size() == 1u);
  // Two points that are not adjacent cannot share a bucket; cuts outside the range fall back.
  const std::vector<cnn::GradientReadyPoint> split = {{0, 10, 1e-3}, {20, 10, 5e-4}, {10, 10, 0.0}};
  const cnn::BucketPlan merged_first = cnn::plan_with_cuts(split, 30, cost, 2);  // {0..10, 20..30} together: no
  BOOST_TEST(merged_first.cuts == 0u);
  BOOST_TEST(merged_first.buckets.size() == 1u);
  BOOST_TEST(cnn::plan_with_cuts(split, 30, cost, 8).buckets.size() == 1u);
  BOOST_TEST(cnn::plan_with_cuts(split, 30, cost, 3).buckets.size() == 3u);
}

BOOST_AUTO_TEST_CASE(reducer_starts_each_bucket_once_its_ranges_are_final) {
  FakeCommunicator comm;
  std::vector<float> grads(1100);
  comm.base = grads.data();
  cnn::OverlapReducer reducer(comm, grads.data(), 1100);
  const std::uint64_t before = reducer.generation();
  BOOST_TEST(!reducer.reduces_early());  // one bucket at the end until a plan is set
  reducer.set_plan(cnn::plan_with_cuts(seed_points(1e-3), 1100, cnn::AllreduceCost{}, 1));
  BOOST_TEST(reducer.generation() != before);  // graphs that captured the old plan must be captured again
  // An early bucket: the CUDA backend computes fc-first only when this says so.
  BOOST_TEST(reducer.reduces_early());
  reducer.gradients_ready(100, 1000);
  BOOST_TEST(comm.calls == "S100+1000 ");
  reducer.all_gradients_ready();
  // The last bucket is started when nothing is left to compute: finish, which a stream-ordered
  // communicator may queue on the backend's own stream.
  BOOST_TEST(comm.calls == "S100+1000 F0+100 W");
  // The next step starts afresh; a plan of one bucket starts only at the end.
  comm.calls.clear();
  reducer.set_plan(cnn::plan_with_cuts(seed_points(1e-3), 1100, cnn::AllreduceCost{}, 0));
  BOOST_TEST(!reducer.reduces_early());
  reducer.gradients_ready(100, 1000);
  BOOST_TEST(comm.calls.empty());
  reducer.all_gradients_ready();
  BOOST_TEST(comm.calls == "F0+1100 W");
  // A plan must cover the buffer.
  cnn::BucketPlan bad;
  bad.buckets.push_back(cnn::GradientBucket{0, 10, -1});
  BOOST_CHECK_THROW(reducer.set_plan(bad), cnn::Error);
}

BOOST_AUTO_TEST_CASE(overlapped_rows_of_allreduce_csv) {
  // Plain row from the phase: 10 steps, 0.01 s in all. Overlapped samples: 4 steps, 80 us of
  // allreduce each, 20 us of it exposed: 75% hidden, bandwidths from the 80 us.
  const cnn::AllreduceStats plain = cnn::allreduce_stats(1, 2, 400000, 10, 0.01);
  BOOST_TEST(plain.exposed_s == plain.mean_s);
  BOOST_TEST(plain.overlap_fraction == 0.0);
  cnn::AsyncAllreduceTimes samples;
  samples.comm_seconds = 4 * 80e-6;
  samples.exposed_seconds = 4 * 20e-6;
  samples.steps = 4;
  const cnn::AllreduceStats a = cnn::with_overlap(plain, samples, 2);
  BOOST_TEST(a.overlap == 1);
  BOOST_TEST(a.buckets == 2);
  BOOST_TEST(a.mean_s == 80e-6, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(a.exposed_s == 20e-6, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(a.overlap_fraction == 0.75, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(a.algbw_GBps == 5.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(a.busbw_GBps == 5.0, boost::test_tools::tolerance(1e-9));  // 2 ranks: 2(n-1)/n = 1
  // No samples: the plain figures stay, marked as overlapped.
  const cnn::AllreduceStats none = cnn::with_overlap(plain, cnn::AsyncAllreduceTimes{}, 1);
  BOOST_TEST(none.mean_s == plain.mean_s);
  BOOST_TEST(none.overlap == 1);
}

BOOST_AUTO_TEST_CASE(five_layers_group_what_the_compute_after_them_can_hide) {
  // One ready point per layer with parameters, as the CPU backend reports a cifar-like network, in
  // backward order: fc2, fc1, conv3, conv2, conv1; `step` seconds of backward per layer.
  const auto points = [](double step) {
    return std::vector<cnn::GradientReadyPoint>{
        {3100, 10, 4 * step}, {2100, 1000, 3 * step}, {1100, 1000, 2 * step}, {100, 1000, step}, {0, 100, 0.0}};
  };
  const cnn::AllreduceCost cost{10e-6, 1e-9};
  // 1 ms per layer hides every bucket but the last; one bucket for the first four hides as much as
  // four would and pays the latency once, so it wins the tie.
  const cnn::BucketPlan plan = cnn::plan_buckets(points(1e-3), 3110, cost);
  BOOST_TEST_REQUIRE(plan.buckets.size() == 2u);
  BOOST_TEST(plan.buckets[0].offset == 100);
  BOOST_TEST(plan.buckets[0].count == 3010);
  BOOST_TEST(plan.buckets[0].last_point == 3);
  BOOST_TEST(plan.buckets[1].offset == 0);
  BOOST_TEST(plan.buckets[1].count == 100);
  BOOST_TEST(plan.buckets[1].last_point == -1);
  BOOST_TEST(plan.cuts == 8u);
  BOOST_TEST(plan.predicted_exposed_s == 10.4e-6, boost::test_tools::tolerance(1e-6));
  // Every layer its own bucket is a valid grouping too, predicted no better.
  const cnn::BucketPlan every = cnn::plan_with_cuts(points(1e-3), 3110, cost, 15);
  BOOST_TEST(every.buckets.size() == 5u);
  BOOST_TEST(every.predicted_exposed_s == plan.predicted_exposed_s, boost::test_tools::tolerance(1e-6));
  // 1 us per layer hides nothing: one bucket at the end.
  BOOST_TEST(cnn::plan_buckets(points(1e-6), 3110, cost).buckets.size() == 1u);
}
