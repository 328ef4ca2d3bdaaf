// The peer probe (include/cnn/peer_probe.hpp) between real ranks, under mpiexec -n 2 and -n 4: every
// live peer answers; a peer whose listener is closed (its process gone, as far as a probe can tell)
// is refused and named; the words name hosts and rank ranges. (Unreachable hosts need a second
// network: tests/slurm_two_node_test.sh cuts a node's link.)
#define BOOST_TEST_MODULE mpi_peer_probe
#include <memory>
#include <vector>

#include "boost_test.hpp"
#include "cnn/communicator.hpp"
#include "cnn/peer_probe.hpp"
#include "cnn/placement.hpp"

using cnn::PeerState;

namespace {

struct World {
  World() : world(&boost::unit_test::framework::master_test_suite().argc,
                  &boost::unit_test::framework::master_test_suite().argv) {}
  cnn::MpiWorld world;
};

}  // namespace

BOOST_AUTO_TEST_CASE(live_peers_answer_and_a_closed_one_is_gone) {
  World w;
  const cnn::MpiWorld& world = w.world;
  auto probe = std::make_unique<cnn::PeerProbe>(world);
  BOOST_TEST(probe->hosts().size() == static_cast<std::size_t>(world.size()));
  BOOST_TEST(probe->hosts()[static_cast<std::size_t>(world.rank())] == world.host());

  // Everyone alive: every peer answers, on every rank, and there is nothing to describe.
  const std::vector<PeerState> all = probe->probe(cnn::kPeerProbeSeconds);
  for (PeerState s : all) BOOST_TEST((s == PeerState::kAnswers));
  BOOST_TEST(cnn::describe_unanswered(probe->hosts(), all, cnn::kPeerProbeSeconds).empty());
  world.barrier();
  probe->accept_pending();

  // The last rank closes its listener, as a process that is gone would: rank 0 finds it refused.
  const int last = world.size() - 1;
  const std::vector<std::string> hosts = probe->hosts();
  if (world.rank() == last) probe.reset();
  world.barrier();
  if (world.rank() == 0) {
    const std::vector<PeerState> states = probe->probe(cnn::kPeerProbeSeconds);
    for (int r = 0; r < world.size(); ++r)
      BOOST_TEST((states[static_cast<std::size_t>(r)] == (r == last ? PeerState::kGone : PeerState::kAnswers)));
    const std::string words = cnn::describe_unanswered(hosts, states, cnn::kPeerProbeSeconds);
    // All ranks share this host here, and the others answer: one rank lost, not the host.
    BOOST_TEST(words == "lost rank " + std::to_string(last) + " on " + hosts[static_cast<std::size_t>(last)] +
                            " (process gone, connection refused)");
  }
  world.barrier();
}

BOOST_AUTO_TEST_CASE(words_group_ranks_by_host) {
  const std::vector<std::string> hosts = {"n1", "n1", "n2", "n2", "n2", "n3", "n3"};
  const std::vector<PeerState> states = {PeerState::kAnswers, PeerState::kAnswers, PeerState::kGone,
                                         PeerState::kGone,    PeerState::kGone,    PeerState::kUnreachable,
                                         PeerState::kAnswers};
  BOOST_TEST(cnn::describe_unanswered(hosts, states, 0.5) ==
             "lost host n2 (ranks 2-4: processes gone, connection refused); host n3 unreachable (rank 5: no "
             "answer within 0.5 s)");
  // Some of a host's ranks gone: those ranks are lost, not the host.
  const std::vector<PeerState> some = {PeerState::kAnswers, PeerState::kGone, PeerState::kAnswers, PeerState::kAnswers,
                                       PeerState::kAnswers, PeerState::kAnswers, PeerState::kAnswers};
  BOOST_TEST(cnn::describe_unanswered(hosts, some, 0.5) == "lost rank 1 on n1 (process gone, connection refused)");
  BOOST_TEST(cnn::ranges_text({0, 2, 3, 4, 7, 9, 10}) == "0,2-4,7,9-10");
  BOOST_TEST(cnn::ranges_text({}).empty());
  BOOST_TEST(cnn::affinity_text().rfind("cpu", 0) == 0);
}
