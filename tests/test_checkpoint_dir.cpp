// The run directory of checkpoints: file naming, the `latest` pointer, pruning to --keep, removal of
// partial files left by a killed writer, and the writability probe.
#define BOOST_TEST_MODULE checkpoint_dir
#include "boost_test.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cnn/checkpoint.hpp"
#include "cnn/errors.hpp"
#include "cnn/model.hpp"
#include "checkpoint_fixtures.hpp"

namespace fs = std::filesystem;
using namespace cnn;

namespace {

constexpr int kFilters = 8;  // small: these tests are about files, not tensors

// A fresh directory per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "cnn_ckptdir_XXXXXX").string();
    BOOST_REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

struct Fixture {
  TempDir tmp;
  ParamLayout layout = SeedModel{{1, 28, 28}, 3, kFilters, 10}.layout();
};

CheckpointState state_at(const ParamLayout& layout, std::int64_t epoch, std::int64_t step) {
  CheckpointState state;
  // 6000 samples: 60 steps of 100 per epoch, so state_at(e, 60 * e) is a real epoch boundary.
  state.config = test::seed_momentum_config(kFilters, 7, 1, 6000);
  state.progress = {epoch, 0, step, step * 100, 2};
  state.params.assign(static_cast<std::size_t>(layout.total()), 0.25f);
  state.optimizer_state.assign(static_cast<std::size_t>(layout.total()), -0.5f);
  state.optimizer_step = step;
  return state;
}

std::string latest_of(const CheckpointDir& dir) {
  std::ifstream in(dir.dir() + "/latest");
  std::string name;
  std::getline(in, name);
  return name;
}

// Runs `call`, which must throw IoError naming `where` and containing `expected`.
template <class Call>
void expect_io_error(const std::string& where, const std::string& expected, Call call) {
  try {
    call();
    BOOST_ERROR("expected an IoError with '" << expected << "'");
  } catch (const IoError& e) {
    const std::string message = e.what();
    BOOST_TEST_MESSAGE("  error: " << message);
    BOOST_CHECK_MESSAGE(message.find(expected) != std::string::npos, "'" << message << "' lacks '" << expected << "'");
    BOOST_CHECK_MESSAGE(message.find(where) != std::string::npos, "'" << message << "' does not name " << where);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_dir)

BOOST_AUTO_TEST_CASE(keep_two_prunes_and_latest_points_at_newest) {
  Fixture f;
  const CheckpointDir dir(f.tmp / "run");
  dir.prepare();
  BOOST_CHECK(dir.list().empty());
  for (int epoch = 1; epoch <= 3; ++epoch) dir.save(state_at(f.layout, epoch, epoch * 60), f.layout, 2);

  const std::vector<std::string> present = dir.list();
  BOOST_REQUIRE_EQUAL(present.size(), 2u);
  BOOST_CHECK_EQUAL(present[0], dir.dir() + "/ckpt-e0003-s00000180.h5");
  BOOST_CHECK_EQUAL(present[1], dir.dir() + "/ckpt-e0002-s00000120.h5");
  BOOST_CHECK_EQUAL(latest_of(dir), "ckpt-e0003-s00000180.h5");
  BOOST_CHECK_EQUAL(read_checkpoint(dir.dir() + "/" + latest_of(dir), f.layout).progress.global_step, 180);
  BOOST_CHECK(!fs::exists(dir.dir() + "/latest.tmp"));
}

BOOST_AUTO_TEST_CASE(never_prunes_the_one_just_written) {
  Fixture f;
  const CheckpointDir dir(f.tmp / "run");
  dir.prepare();
  dir.save(state_at(f.layout, 9, 900), f.layout, 1);
  const std::string written = dir.save(state_at(f.layout, 1, 5), f.layout, 1);  // an older step, e.g. a rerun
  BOOST_CHECK(fs::exists(written));
  BOOST_CHECK_EQUAL(latest_of(dir), "ckpt-e0001-s00000005.h5");
}

BOOST_AUTO_TEST_CASE(prepare_removes_stale_partial_files) {
  Fixture f;
  const CheckpointDir dir(f.tmp / "run");
  dir.prepare();
  const std::string kept = dir.save(state_at(f.layout, 1, 60), f.layout, 3);
  const std::string stale = dir.dir() + "/ckpt-e0002-s00000120.h5.tmp";
  std::ofstream(stale) << "half a checkpoint";
  std::ofstream(dir.dir() + "/latest.tmp") << "ckpt-e0002";
  dir.prepare();
  BOOST_CHECK(!fs::exists(stale));
  BOOST_CHECK(!fs::exists(dir.dir() + "/latest.tmp"));
  BOOST_CHECK(fs::exists(kept));
  BOOST_CHECK_EQUAL(dir.list().size(), 1u);
}

BOOST_AUTO_TEST_CASE(list_orders_by_step_and_ignores_other_files) {
  Fixture f;
  const CheckpointDir dir(f.tmp / "run");
  dir.prepare();
  // list() goes by name only, so empty files will do.
  for (const char* name : {"ckpt-e0001-s00000010.h5", "ckpt-e0010-s00000002.h5", "ckpt-e12345-s123456789.h5",
                           "ckpt-e0001-s0000001x.h5", "ckpt-e0001-s00000011.h5.tmp", "latest", "notes.txt"}) {
    std::ofstream(dir.dir() + "/" + name);
  }
  const std::vector<std::string> expected = {dir.dir() + "/ckpt-e12345-s123456789.h5",
                                             dir.dir() + "/ckpt-e0001-s00000010.h5",
                                             dir.dir() + "/ckpt-e0010-s00000002.h5"};
  const std::vector<std::string> present = dir.list();
  BOOST_CHECK_EQUAL_COLLECTIONS(present.begin(), present.end(), expected.begin(), expected.end());
  BOOST_CHECK(CheckpointDir(f.tmp / "never-prepared").list().empty());
}

// Permission bits cannot make a directory unwritable for root (tests often run as root), so the
// failures are forced in ways no user can override: a path through a regular file (mkdir gets
// ENOTDIR), and a `checkpoints` entry that is a link to /proc/self, where no one can create files.
BOOST_AUTO_TEST_CASE(unwritable_directory_detected) {
  Fixture f;
  const std::string file = f.tmp / "file.txt";
  std::ofstream(file) << "not a directory";
  const CheckpointDir under_file(file + "/sub");
  expect_io_error(file + "/sub", "Not a directory", [&] { under_file.prepare(); });

  if (fs::is_directory("/proc/self")) {
    const CheckpointDir proc_dir(f.tmp / "run");
    fs::create_directories(f.tmp / "run");
    fs::create_directory_symlink("/proc/self", proc_dir.dir());
    expect_io_error(proc_dir.dir(), "checkpoints: not writable:", [&] { proc_dir.prepare(); });
  }
  if (::geteuid() != 0) {
    const CheckpointDir read_only(f.tmp / "ro");
    read_only.prepare();
    fs::permissions(read_only.dir(), fs::perms::owner_read | fs::perms::owner_exec);
    expect_io_error(read_only.dir(), "not writable: Permission denied", [&] { read_only.prepare(); });
    fs::permissions(read_only.dir(), fs::perms::owner_all);
  }
}

BOOST_AUTO_TEST_SUITE_END()

