#include "cnn/peer_probe.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <atomic>
#include <map>

#include "cnn/mpi_check.hpp"
#include "cnn/placement.hpp"

namespace cnn {

namespace {

// One rank's entry in the swap: fixed size, so that one MPI_Allgather of bytes carries it.
constexpr int kMaxAddresses = 8;
constexpr int kHostBytes = 64;
struct Record {
  char host[kHostBytes];
  std::uint16_t port;
  std::uint16_t count;
  std::uint32_t addresses[kMaxAddresses];
};

// Sockets polled at once: well below the usual limit of 1024 open files.
constexpr std::size_t kBatch = 512;
// The longest the watchdog thread waits for the byte of a connection it accepted (sent right after the
// connection completes, so it is there already but for scheduling).
constexpr int kByteWaitMilliseconds = 20;

std::atomic<const PeerProbe*> g_active{nullptr};

// This node's IPv4 addresses that other nodes may reach: every interface that is up, except loopback;
// only loopback on a machine without a network (all ranks on one host then).
std::vector<std::uint32_t> node_addresses() {
  std::vector<std::uint32_t> found;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (const ifaddrs* a = list; a != nullptr && found.size() < kMaxAddresses; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
      if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
      found.push_back(reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr);
    }
    freeifaddrs(list);
  }
  if (found.empty()) found.push_back(htonl(INADDR_LOOPBACK));
  return found;
}

// A listening socket on every address, port picked by the kernel; -1 if the node allows none.
int open_listener(std::uint16_t& port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(fd, 128) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    return -1;
  }
  port = ntohs(address.sin_port);
  return fd;
}

struct Attempt {
  int rank;
  int fd;
};

// Starts a non-blocking connection; returns the socket, or -1 with `refused` set when it failed at once.
int start_connect(std::uint32_t address, std::uint16_t port, bool& refused) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_addr.s_addr = address;
  target.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof(target)) == 0 || errno == EINPROGRESS) return fd;
  refused = refused || errno == ECONNREFUSED;
  close(fd);
  return -1;
}

}  // namespace

std::string describe_unanswered(const std::vector<std::string>& hosts, const std::vector<PeerState>& states,
                                double probe_seconds) {
  // Hosts in the order of their lowest rank, each with its gone and its unreachable ranks.
  std::vector<std::string> order;
  std::map<std::string, std::pair<std::vector<int>, std::vector<int>>> by_host;
  std::map<std::string, std::size_t> ranks_on;
  for (const std::string& host : hosts) ++ranks_on[host];
  for (std::size_t r = 0; r < states.size() && r < hosts.size(); ++r) {
    if (states[r] == PeerState::kAnswers) continue;
    if (by_host.find(hosts[r]) == by_host.end()) order.push_back(hosts[r]);
    auto& lists = by_host[hosts[r]];
    (states[r] == PeerState::kGone ? lists.first : lists.second).push_back(static_cast<int>(r));
  }
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f s", probe_seconds);
  const auto ranks = [](const std::vector<int>& list) {
    return std::string(list.size() == 1 ? "rank " : "ranks ") + ranges_text(list);
  };
  std::string text;
  for (const std::string& host : order) {
    const auto& [gone, unreachable] = by_host[host];
    if (!text.empty()) text += "; ";
    const std::string processes = std::string("process") + (gone.size() == 1 ? "" : "es") + " gone, connection refused";
    // A host whose ranks are all gone is lost (a crashed or killed node); else some of its ranks are.
    if (!gone.empty() && gone.size() == ranks_on[host])
      text += "lost host " + host + " (" + ranks(gone) + ": " + processes + ")";
    else if (!gone.empty())
      text += "lost " + ranks(gone) + " on " + host + " (" + processes + ")";
    if (!gone.empty() && !unreachable.empty()) text += "; ";
    if (!unreachable.empty())
      text += "host " + host + " unreachable (" + ranks(unreachable) + ": no answer within " + seconds + ")";
  }
  return text;
}

PeerProbe::PeerProbe(const MpiWorld& world) : rank_(world.rank()) {
  Record mine{};
  std::snprintf(mine.host, sizeof(mine.host), "%s", world.host().c_str());
  listener_ = open_listener(mine.port);  // port 0: this rank cannot be probed (peers count it as answering)
  const std::vector<std::uint32_t> addresses = node_addresses();
  if (listener_ < 0) mine.port = 0;
  mine.count = static_cast<std::uint16_t>(addresses.size());
  std::copy(addresses.begin(), addresses.end(), mine.addresses);

  std::vector<Record> all(static_cast<std::size_t>(world.size()));
  CNN_CHECK_MPI(MPI_Allgather(&mine, sizeof(Record), MPI_BYTE, all.data(), sizeof(Record), MPI_BYTE, world.comm()));
  for (const Record& r : all) {
    hosts_.emplace_back(r.host, strnlen(r.host, sizeof(r.host)));
    Peer peer;
    peer.port = r.port;
    peer.addresses.assign(r.addresses, r.addresses + std::min<int>(r.count, kMaxAddresses));
    peers_.push_back(std::move(peer));
  }
  g_active.store(this);
}

PeerProbe::~PeerProbe() {
  const PeerProbe* self = this;
  g_active.compare_exchange_strong(self, nullptr);
  if (listener_ >= 0) close(listener_);
}

const PeerProbe* PeerProbe::active() { return g_active.load(); }

void PeerProbe::accept_pending() const {
  if (listener_ < 0) return;
  for (;;) {
    const int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN: the queue is empty
    pollfd readable{fd, POLLIN, 0};
    char byte = 0;
    if (poll(&readable, 1, kByteWaitMilliseconds) > 0 && recv(fd, &byte, 1, MSG_DONTWAIT) == 1 && byte == kEndByte)
      end_reported_.store(true, std::memory_order_relaxed);
    close(fd);
  }
}

std::vector<PeerState> PeerProbe::reach(double seconds, char message, const std::vector<PeerState>& known) const {
  const std::size_t n = peers_.size();
  std::vector<PeerState> states(n, PeerState::kAnswers);
  std::vector<bool> refused(n, false), connected(n, false);
  std::vector<int> targets;
  for (std::size_t r = 0; r < n; ++r)
    if (static_cast<int>(r) != rank_ && peers_[r].port != 0 && (r >= known.size() || known[r] == PeerState::kAnswers))
      targets.push_back(static_cast<int>(r));

  for (std::size_t first = 0; first < targets.size();) {
    // A batch of peers, every address of each at once.
    std::vector<Attempt> attempts;
    std::size_t next = first;
    for (; next < targets.size() && attempts.size() < kBatch; ++next) {
      const int r = targets[next];
      bool refused_now = false;
      for (std::uint32_t address : peers_[static_cast<std::size_t>(r)].addresses) {
        const int fd = start_connect(address, peers_[static_cast<std::size_t>(r)].port, refused_now);
        if (fd >= 0) attempts.push_back({r, fd});
      }
      if (refused_now) refused[static_cast<std::size_t>(r)] = true;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    std::vector<bool> done(attempts.size(), false);
    for (;;) {
      std::vector<pollfd> waiting;
      std::vector<std::size_t> index;
      for (std::size_t i = 0; i < attempts.size(); ++i) {
        if (done[i] || connected[static_cast<std::size_t>(attempts[i].rank)]) continue;
        waiting.push_back({attempts[i].fd, POLLOUT, 0});
        index.push_back(i);
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (waiting.empty() || left.count() <= 0) break;
      if (poll(waiting.data(), waiting.size(), static_cast<int>(left.count())) < 0 && errno != EINTR) break;
      for (std::size_t k = 0; k < waiting.size(); ++k) {
        if (waiting[k].revents == 0) continue;
        const Attempt& a = attempts[index[k]];
        int error = 0;
        socklen_t length = sizeof(error);
        getsockopt(a.fd, SOL_SOCKET, SO_ERROR, &error, &length);
        if (error == 0) {
          connected[static_cast<std::size_t>(a.rank)] = true;
          (void)!send(a.fd, &message, 1, MSG_NOSIGNAL | MSG_DONTWAIT);  // what the peer's accept reads
        }
        if (error == ECONNREFUSED) refused[static_cast<std::size_t>(a.rank)] = true;
        done[index[k]] = true;
      }
    }
    for (const Attempt& a : attempts) close(a.fd);
    for (std::size_t i = first; i < next; ++i) {
      const auto r = static_cast<std::size_t>(targets[i]);
      states[r] = connected[r] ? PeerState::kAnswers : refused[r] ? PeerState::kGone : PeerState::kUnreachable;
    }
    first = next;
  }
  return states;
}

}  // namespace cnn
