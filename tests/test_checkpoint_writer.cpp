// The asynchronous checkpoint's writer (include/cnn/checkpoint_writer.hpp): start() hands the write to
// a thread and returns before the file exists; wait() gives the file or rethrows the write's error;
// one write at a time; the previous checkpoint stays whole and readable (libhdf5 used by the reading
// thread meanwhile, under the library lock) until the new one is complete, and --keep 1 never leaves
// the directory without a valid file. CNN_TEST_WRITE_PAUSE_MS's hook (fsutil::set_test_write_pause_ms)
// slows every stage of a write, so a write is surely still in flight when the test looks.
#define BOOST_TEST_MODULE checkpoint_writer
#include "boost_test.hpp"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cnn/checkpoint.hpp"
#include "cnn/checkpoint_writer.hpp"
#include "cnn/errors.hpp"
#include "cnn/model.hpp"
#include "cnn/phase_times.hpp"
#include "cnn/test_hooks.hpp"
#include "checkpoint_fixtures.hpp"

namespace fs = std::filesystem;
using namespace cnn;

namespace {

constexpr int kFilters = 8;
constexpr long kPauseMs = 100;  // per stage of a write: a write takes 500 ms or more

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "cnn_ckptwriter_XXXXXX").string();
    BOOST_REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// Slow writes for the lifetime of the object.
struct SlowWrites {
  SlowWrites() { fsutil::set_test_write_pause_ms(kPauseMs); }
  ~SlowWrites() { fsutil::set_test_write_pause_ms(0); }
};

struct Fixture {
  TempDir tmp;
  ParamLayout layout = SeedModel{{1, 28, 28}, 3, kFilters, 10}.layout();
  CheckpointDir dir{tmp.path.string()};
  Fixture() { dir.prepare(); }
};

// A valid momentum checkpoint at (epoch, step), its parameters all `value`.
CheckpointState state_at(const ParamLayout& layout, std::int64_t epoch, std::int64_t step, float value) {
  CheckpointState state;
  state.config = test::seed_momentum_config(kFilters, 7, 1, 6000);
  state.progress = {epoch, 0, step, step * 100, 1};
  state.params.assign(static_cast<std::size_t>(layout.total()), value);
  state.optimizer_state.assign(static_cast<std::size_t>(layout.total()), -value);
  state.optimizer_step = step;
  return state;
}

std::string latest_of(const CheckpointDir& dir) {
  std::ifstream in(dir.dir() + "/latest");
  std::string name;
  std::getline(in, name);
  return dir.dir() + "/" + name;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_writer)

BOOST_AUTO_TEST_CASE(start_returns_at_once_and_wait_gives_the_complete_file) {
  Fixture f;
  const SlowWrites slow;
  CheckpointWriter writer(f.dir, f.layout, 3);
  const CheckpointState state = state_at(f.layout, 1, 60, 0.25f);
  const double start = wall_seconds();
  writer.start(state, CheckpointTensors::of(state));
  const double seconds = wall_seconds() - start;
  BOOST_TEST_MESSAGE("start() took " << 1e3 * seconds << " ms");
  BOOST_CHECK_LT(seconds, kPauseMs / 1e3);  // the write itself pauses that long several times
  BOOST_CHECK(writer.in_flight());
  BOOST_CHECK(!writer.finished());
  BOOST_CHECK(!fs::exists(f.dir.path_for(state.progress)));  // not before the write's rename

  const auto written = writer.wait();
  BOOST_REQUIRE(written.has_value());
  BOOST_CHECK_EQUAL(written->path, f.dir.path_for(state.progress));
  BOOST_CHECK_GE(written->seconds, 4 * kPauseMs / 1e3);
  BOOST_CHECK(!writer.in_flight());
  BOOST_CHECK_EQUAL(latest_of(f.dir), written->path);
  const CheckpointState loaded = read_checkpoint(written->path, f.layout);
  BOOST_CHECK(loaded.params == state.params);
  BOOST_CHECK(loaded.optimizer_state == state.optimizer_state);
  BOOST_CHECK_EQUAL(loaded.progress.global_step, 60);
  BOOST_CHECK(!writer.wait().has_value());  // nothing in flight any more
}

BOOST_AUTO_TEST_CASE(one_write_at_a_time) {
  Fixture f;
  const SlowWrites slow;
  CheckpointWriter writer(f.dir, f.layout, 3);
  const CheckpointState first = state_at(f.layout, 1, 60, 0.25f);
  const CheckpointState second = state_at(f.layout, 2, 120, 0.5f);
  writer.start(first, CheckpointTensors::of(first));
  BOOST_CHECK_THROW(writer.start(second, CheckpointTensors::of(second)), std::logic_error);
  BOOST_CHECK(writer.wait().has_value());
  writer.start(second, CheckpointTensors::of(second));
  BOOST_CHECK_EQUAL(writer.wait()->path, f.dir.path_for(second.progress));
}

// --keep 1 with slow writes: while the next write is in flight, the one file there is still the
// previous checkpoint, whole, and this thread reads it with libhdf5 while the writer's thread builds
// its file (serialised by the library lock); each new file replaces it only once complete.
BOOST_AUTO_TEST_CASE(previous_checkpoint_stays_valid_until_the_new_one_is_complete) {
  Fixture f;
  CheckpointWriter writer(f.dir, f.layout, 1);
  const CheckpointState first = state_at(f.layout, 1, 60, 0.25f);
  writer.start(first, CheckpointTensors::of(first));
  const std::string first_path = writer.wait()->path;

  const SlowWrites slow;
  std::string previous = first_path;
  float previous_value = 0.25f;
  for (int epoch = 2; epoch <= 3; ++epoch) {
    const CheckpointState next = state_at(f.layout, epoch, 60 * epoch, 0.25f * static_cast<float>(epoch));
    writer.start(next, CheckpointTensors::of(next));
    int reads = 0;
    while (!writer.finished()) {
      const std::vector<std::string> present = f.dir.list();
      BOOST_REQUIRE(!present.empty());
      // The newest complete file: the previous one until the new one is renamed into place.
      CheckpointState loaded;
      try {
        loaded = read_checkpoint(present.front(), f.layout);
      } catch (const IoError&) {
        // Pruned between the listing and the read: only ever after the new file is complete.
        BOOST_REQUIRE(!fs::exists(present.front()));
        BOOST_REQUIRE(!f.dir.list().empty());
        continue;
      }
      if (present.front() == previous) BOOST_CHECK_EQUAL(loaded.params.front(), previous_value);
      ++reads;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    BOOST_TEST_MESSAGE("epoch " << epoch << ": " << reads << " reads while the write was in flight");
    BOOST_CHECK_GT(reads, 3);
    const std::string written = writer.wait()->path;
    const std::vector<std::string> present = f.dir.list();
    BOOST_REQUIRE_EQUAL(present.size(), 1u);  // --keep 1: the new file, and only once it is complete
    BOOST_CHECK_EQUAL(present.front(), written);
    BOOST_CHECK_EQUAL(read_checkpoint(written, f.layout).params.front(), next.params.front());
    previous = written;
    previous_value = next.params.front();
  }
}

// The write's error surfaces from wait(), on the caller's thread, as the same IoError a synchronous
// save throws; failed() says so before, without waiting; `latest` and the previous file are untouched.
BOOST_AUTO_TEST_CASE(a_failed_write_is_rethrown_by_wait) {
  Fixture f;
  CheckpointWriter writer(f.dir, f.layout, 3);
  const CheckpointState good = state_at(f.layout, 1, 60, 0.25f);
  writer.start(good, CheckpointTensors::of(good));
  const std::string good_path = writer.wait()->path;

  const CheckpointState bad = state_at(f.layout, 2, 120, 0.5f);
  const std::string blocked = f.dir.path_for(bad.progress) + ".tmp";
  fs::create_directory(blocked);  // open(O_CREAT|O_TRUNC) of the .tmp fails: EISDIR
  writer.start(bad, CheckpointTensors::of(bad));
  for (int i = 0; i < 1000 && !writer.finished(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  BOOST_REQUIRE(writer.finished());
  BOOST_CHECK(writer.failed());
  try {
    (void)writer.wait();
    BOOST_ERROR("wait() did not rethrow the write's failure");
  } catch (const IoError& e) {
    const std::string message = e.what();
    BOOST_TEST_MESSAGE("  error: " << message);
    BOOST_CHECK_EQUAL(message, blocked + ": cannot create: Is a directory");
  }
  BOOST_CHECK(!writer.in_flight());
  BOOST_CHECK(!writer.failed());
  BOOST_CHECK_EQUAL(latest_of(f.dir), good_path);
  BOOST_CHECK(read_checkpoint(good_path, f.layout).params == good.params);
  fs::remove(blocked);
  writer.start(bad, CheckpointTensors::of(bad));  // the writer goes on after a failure
  BOOST_CHECK_EQUAL(writer.wait()->path, f.dir.path_for(bad.progress));
}

BOOST_AUTO_TEST_CASE(destruction_waits_for_the_write_in_flight) {
  Fixture f;
  const CheckpointState state = state_at(f.layout, 1, 60, 0.25f);
  {
    const SlowWrites slow;
    CheckpointWriter writer(f.dir, f.layout, 3);
    writer.start(state, CheckpointTensors::of(state));
    BOOST_CHECK(!fs::exists(f.dir.path_for(state.progress)));
  }
  BOOST_CHECK(read_checkpoint(f.dir.path_for(state.progress), f.layout).params == state.params);
  BOOST_CHECK_EQUAL(latest_of(f.dir), f.dir.path_for(state.progress));
}

BOOST_AUTO_TEST_SUITE_END()
