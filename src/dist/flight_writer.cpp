#include "cnn/flight_writer.hpp"

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace cnn {

namespace {
// How long the destructor waits for the thread to finish what it was asked.
constexpr std::chrono::seconds kFinishSeconds{2};
}  // namespace

struct FlightWriter::State {
  explicit State(std::shared_ptr<const FlightSite> s) : site(std::move(s)) {}
  const std::shared_ptr<const FlightSite> site;
  std::mutex mutex;
  std::condition_variable changed;
  std::optional<std::string> record_why;  // the next record's reason
  std::uint64_t records_asked = 0, records_done = 0;
  std::optional<std::uint64_t> read_waited_in;
  std::uint64_t reads_asked = 0, reads_done = 0;
  std::optional<Arrivals> read_result;
  bool stop = false;
  bool exited = false;

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return stop || read_waited_in || record_why; });
      if (read_waited_in) {  // first: a watchdog about to fire waits for it
        const std::uint64_t waited_in = *read_waited_in;
        const std::uint64_t id = reads_asked;
        read_waited_in.reset();
        lock.unlock();
        std::optional<Arrivals> result;
        try {
          result = read_arrivals(*site, waited_in);
        } catch (...) {  // out of memory: no verdict, the abort goes on
        }
        lock.lock();
        read_result = std::move(result);
        reads_done = id;
      } else if (record_why) {
        const std::string why = std::move(*record_why);
        record_why.reset();
        const std::uint64_t id = records_asked;
        lock.unlock();
        try {
          (void)write_flight_record(*site, why);  // a record that cannot be written is no record
        } catch (...) {
        }
        lock.lock();
        records_done = id;
      } else {
        break;  // stop, with nothing left to do
      }
      changed.notify_all();
    }
    exited = true;
    changed.notify_all();
  }
};

FlightWriter::FlightWriter(std::shared_ptr<const FlightSite> site) : state_(std::make_shared<State>(std::move(site))) {
  thread_ = std::thread([state = state_] { state->run(); });
}

FlightWriter::~FlightWriter() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->stop = true;
  state_->changed.notify_all();
  const bool exited = state_->changed.wait_for(lock, kFinishSeconds, [&] { return state_->exited; });
  lock.unlock();
  if (exited) thread_.join();
  else thread_.detach();
}

void FlightWriter::publish(const std::string& why) {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  state_->record_why = why;
  ++state_->records_asked;
  state_->changed.notify_all();
}

bool FlightWriter::publish_and_wait(const std::string& why, double seconds) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->record_why = why;
  const std::uint64_t id = ++state_->records_asked;
  state_->changed.notify_all();
  return state_->changed.wait_for(lock, std::chrono::duration<double>(seconds),
                                  [&] { return state_->records_done >= id; });
}

std::optional<Arrivals> FlightWriter::arrivals(std::uint64_t waited_in, double seconds) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->read_waited_in = waited_in;
  const std::uint64_t id = ++state_->reads_asked;
  state_->changed.notify_all();
  if (!state_->changed.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return state_->reads_done >= id; }))
    return std::nullopt;
  return state_->read_result;
}

}  // namespace cnn
