#include "cnn/flight_site.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "cnn/flight_file.hpp"
#include "cnn/flight_recorder.hpp"
#include "cnn/mpi_check.hpp"
#include "cnn/watchdog.hpp"

namespace cnn {

namespace {

// What each rank tells the others at set-up: one fixed-size record, so one MPI_Allgather.
struct SiteCard {
  char host[256];             // MPI_MAX_PROCESSOR_NAME in Open MPI and MPICH; longer names are cut
  double stall_timeout;
  std::int64_t pid;
  std::int64_t start_ns;      // rank 0's names the start of the job
  std::int32_t sees_run_dir;
  std::int32_t unused;
};

std::mutex g_site_mutex;
std::shared_ptr<const FlightSite> g_site;
std::atomic<bool> g_final{false};  // write_flight_record_now wrote: a collective failed

std::int64_t utc_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

FlightSite set_up_flight_site(const MpiWorld& world, const std::string& run_dir, double stall_timeout) {
  SiteCard mine{};
  std::strncpy(mine.host, world.host().c_str(), sizeof(mine.host) - 1);
  mine.stall_timeout = stall_timeout;
  mine.pid = static_cast<std::int64_t>(::getpid());
  mine.start_ns = utc_ns();
  mine.sees_run_dir = is_directory(run_dir) ? 1 : 0;  // rank 0 made it before (run_setup.cpp)
  std::vector<SiteCard> cards(static_cast<std::size_t>(world.size()));
  recorded_collective(CollectiveOp::kAllgather, sizeof(SiteCard), [&] {
    CNN_CHECK_MPI(MPI_Allgather(&mine, sizeof(SiteCard), MPI_BYTE, cards.data(), sizeof(SiteCard), MPI_BYTE,
                                world.comm()));
  });

  FlightSite site;
  site.dir = run_dir + "/flight";
  site.rank = world.rank();
  site.size = world.size();
  site.host = world.host();
  double smallest = 0.0;
  for (const SiteCard& card : cards) {
    site.hosts.emplace_back(card.host, strnlen(card.host, sizeof(card.host)));
    site.keeps_record.push_back(card.stall_timeout > 0 && card.sees_run_dir ? 1 : 0);
    if (card.stall_timeout > 0) smallest = smallest > 0 ? std::min(smallest, card.stall_timeout) : card.stall_timeout;
  }
  // Ranks may run different --stall-timeout values (it may differ per node): half the smallest is
  // before the first watchdog of the job can fire (a timeout plus a grace of at least 5 s).
  site.publish_after = smallest / 2;
  // Rank 0's process and clock at this collective name the start; a resume is another process.
  char run[400];
  const SiteCard& root = cards[0];
  const std::int64_t s = root.start_ns / 1000000000, us = root.start_ns % 1000000000 / 1000;
  std::snprintf(run, sizeof(run), "rank 0 pid %lld on %s, %lld.%06lld", static_cast<long long>(root.pid),
                site.hosts[0].c_str(), static_cast<long long>(s), static_cast<long long>(us));
  site.run = run;
  return site;
}

FlightSiteInstall::FlightSiteInstall(std::shared_ptr<const FlightSite> site) {
  const std::lock_guard<std::mutex> lock(g_site_mutex);
  g_site = std::move(site);
}

FlightSiteInstall::~FlightSiteInstall() {
  const std::lock_guard<std::mutex> lock(g_site_mutex);
  g_site.reset();
}

std::string flight_record_text(const FlightSite& site, const std::string& why) {
  const std::vector<FlightEntry> entries = flight_snapshot();
  FlightFileHeader h;
  h.rank = site.rank;
  h.size = site.size;
  h.host = site.host;
  h.pid = static_cast<long>(::getpid());
  h.run = site.run;
  h.written_ns = utc_ns();
  h.why = why;
  h.entered = flight_entered();  // after the snapshot: at least its newest
  h.phase = watch_phase_name(current_watch_phase());
  h.step = current_global_step();
  h.heartbeats = heartbeat_count();
  return format_flight_file(h, entries);
}

std::string write_flight_record(const FlightSite& site, const std::string& why) {
  return write_flight_file(site.dir, site.rank, flight_record_text(site, why));
}

void write_flight_record_now(const std::string& why) noexcept {
  try {
    std::shared_ptr<const FlightSite> site;
    {
      const std::lock_guard<std::mutex> lock(g_site_mutex);
      site = g_site;
    }
    if (!site) return;
    g_final.store(true, std::memory_order_relaxed);
    (void)write_flight_record(*site, why);  // a failure to record must not hide the failure itself
  } catch (...) {
  }
}

bool flight_record_is_final() noexcept { return g_final.load(std::memory_order_relaxed); }

}  // namespace cnn
