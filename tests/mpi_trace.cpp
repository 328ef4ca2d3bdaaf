// The trace gathers every rank's window to rank 0, which writes one track per rank named
// "rank R (host)"; run under mpiexec -n 2 and -n 4.
#define BOOST_TEST_MODULE mpi_trace
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "boost_test.hpp"
#include "cnn/communicator.hpp"
#include "cnn/trace.hpp"

namespace {

struct World {
  World() : world(&boost::unit_test::framework::master_test_suite().argc,
                  &boost::unit_test::framework::master_test_suite().argv) {}
  cnn::MpiWorld world;
};

}  // namespace

BOOST_AUTO_TEST_CASE(every_rank_gets_a_named_track) {
  World w;
  const cnn::MpiWorld& world = w.world;
  std::string path = "/tmp/cnn_mpi_trace_" + std::to_string(::getpid()) + ".json";
  path = world.broadcast_string(path);
  world.barrier();
  cnn::TraceRecorder rec({1, 3}, cnn::wall_seconds());
  // Rank r records r+1 steps of the window's 2 (the window holds steps 1 and 2 only).
  for (std::int64_t step = 0; step < 2 + world.rank(); ++step) {
    cnn::PhaseTimes t;
    t.add(cnn::Phase::kForward, 1e-3);
    rec.record_step(step, cnn::wall_seconds(), 2e-3, t);
  }
  rec.gather_and_write(world, path);
  rec.gather_and_write(world, path);  // once only: a second call is a no-op, on every rank
  if (world.rank() == 0) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const std::string json = text.str();
    for (int r = 0; r < world.size(); ++r) {
      BOOST_TEST(json.find("\"name\":\"rank " + std::to_string(r) + " (" + world.host() + ")\"") !=
                 std::string::npos);
      BOOST_TEST(json.find("\"ph\":\"X\",\"pid\":" + std::to_string(r) + ",") != std::string::npos);
    }
    BOOST_TEST(json.find("\"step\":0") == std::string::npos);  // outside the window
    BOOST_TEST(json.find("\"step\":3") == std::string::npos);
    std::remove(path.c_str());
  }
  world.barrier();
}
