// Rank spreads (min <= mean <= max, the slowest rank) and allreduce bandwidths as nccl-tests defines
// them, and the run log's step row and allreduce.csv (kept across a resume only up to its epoch).
#define BOOST_TEST_MODULE timing_stats
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "boost_test.hpp"
#include "cnn/run_log.hpp"
#include "cnn/timing_stats.hpp"

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string temp_dir() {
  char pattern[] = "/tmp/cnn_timing_XXXXXX";
  const char* dir = mkdtemp(pattern);
  BOOST_TEST_REQUIRE(dir != nullptr);
  return std::string(dir) + "/run";
}

}  // namespace

BOOST_AUTO_TEST_CASE(spread_finds_min_mean_max_and_slowest_rank) {
  const cnn::RankSpread s = cnn::spread_of({2.0, 5.0, 1.0, 5.0});
  BOOST_TEST(s.min == 1.0);
  BOOST_TEST(s.max == 5.0);
  BOOST_TEST(s.mean == 3.25);
  BOOST_TEST(s.max_rank == 1);  // the first of equals
  const cnn::RankSpread one = cnn::spread_of({0.1 + 0.2});
  BOOST_TEST((one.min <= one.mean && one.mean <= one.max));
  const cnn::RankSpread none = cnn::spread_of({});
  BOOST_TEST(none.max == 0.0);
}

BOOST_AUTO_TEST_CASE(bandwidths_follow_nccl_tests) {
  // 4 ranks, 100 MB per allreduce, 10 allreduces in 2 s: 0.2 s each, algbw 0.5 GB/s, busbw 0.75 GB/s.
  const cnn::AllreduceStats a = cnn::allreduce_stats(3, 4, 100000000, 10, 2.0);
  BOOST_TEST(a.mean_s == 0.2, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(a.algbw_GBps == 0.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(a.busbw_GBps == 0.75, boost::test_tools::tolerance(1e-12));
  const cnn::AllreduceStats two = cnn::allreduce_stats(1, 2, 1000, 1, 1e-6);
  BOOST_TEST(two.busbw_GBps == two.algbw_GBps, boost::test_tools::tolerance(1e-12));  // 2(n-1)/n = 1
  const cnn::AllreduceStats idle = cnn::allreduce_stats(1, 1, 1000, 0, 0.0);
  BOOST_TEST(idle.algbw_GBps == 0.0);
}

BOOST_AUTO_TEST_CASE(run_log_writes_step_row_and_allreduce_and_truncates_on_resume) {
  const cnn::RunLog log(temp_dir());
  log.prepare();
  for (int epoch = 1; epoch <= 3; ++epoch) {
    cnn::EpochMetrics m;
    m.epoch = epoch;
    cnn::PhaseSpread p;
    p.phase = cnn::Phase::kForward;
    p.min = p.mean = p.max = 1.0;
    log.append_epoch(m, {p}, cnn::spread_of({1.5, 2.0}));
    log.append_allreduce(cnn::allreduce_stats(epoch, 2, 400, 10, 0.01));
  }
  const std::string timing = read_all(log.timing_path());
  BOOST_TEST(timing.find("epoch,phase,min_s,mean_s,max_s,max_rank\n1,forward,1,1,1,0\n1,step,1.5,1.75,2,1\n") == 0u);
  const std::string allreduce = read_all(log.allreduce_path());
  // A plain step: overlap 0, one bucket, all of the allreduce exposed, nothing hidden.
  BOOST_TEST(allreduce.find("epoch,ranks,bytes_per_step,steps,mean_s,algbw_GBps,busbw_GBps,overlap,buckets,exposed_s,"
                            "overlap_fraction\n1,2,400,10,0.001,0.0004,0.0004,0,1,0.001,0\n") == 0u);
  log.prepare_resume(2);
  const std::string kept = read_all(log.allreduce_path());
  BOOST_TEST(kept.find("\n3,") == std::string::npos);
  BOOST_TEST(kept.find("\n2,") != std::string::npos);
  BOOST_TEST(read_all(log.timing_path()).find("\n3,step") == std::string::npos);
}
