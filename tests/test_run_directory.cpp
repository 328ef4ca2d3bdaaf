// Who may write into a run directory (include/cnn/run_directory.hpp): the admission rules, the lock
// that a second run meets, the run id, and the --trace target. Each refusal must leave the directory as
// it was.
#define BOOST_TEST_MODULE run_directory
#include "boost_test.hpp"

#include <sys/file.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cnn/errors.hpp"
#include "cnn/run_directory.hpp"
#include "test_files.hpp"

using namespace cnn;
using cnn::test::error_of;
using cnn::test::TempDir;
using Mode = ResumeRequest::Mode;

namespace {

void write(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  return text;
}

RunDirContents holding(const std::string& earlier, const std::string& run_id, bool checkpoints = false) {
  RunDirContents c;
  c.exists = true;
  c.earlier_run = earlier;
  c.run_id = run_id;
  c.has_checkpoints = checkpoints;
  return c;
}

ResumeRequest request(Mode mode, bool resumed = false, const std::string& id = "", bool in_out = false) {
  ResumeRequest r;
  r.mode = mode;
  r.resumed = resumed;
  r.checkpoint_run_id = id;
  r.checkpoint_in_out = in_out;
  return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_fresh_run_takes_only_a_directory_without_an_earlier_run) {
  BOOST_TEST(admit_run("d", RunDirContents{}, request(Mode::kNone), "new") == "new");
  BOOST_TEST(admit_run("d", holding("", ""), request(Mode::kNone), "new") == "new");  // exists, empty
  // A run killed in its first epoch leaves checkpoints and no metrics.csv: still an earlier run.
  for (const char* earlier : {"checkpoints/", "runs.log", "metrics.csv", "run_id"}) {
    const std::string e = error_of<UsageError>([&] { admit_run("d", holding(earlier, "x"), request(Mode::kNone), "new"); });
    BOOST_TEST(e.find("d: already holds a run (" + std::string(earlier) + ")") != std::string::npos, e);
  }
}

BOOST_AUTO_TEST_CASE(resume_auto_continues_the_directorys_own_run) {
  BOOST_TEST(admit_run("d", holding("runs.log", "abc"), request(Mode::kAuto, true, "abc"), "new") == "abc");
  BOOST_TEST(admit_run("d", holding("runs.log", ""), request(Mode::kAuto, true, "abc"), "new") == "abc");
  BOOST_TEST(admit_run("d", holding("runs.log", ""), request(Mode::kAuto, true, ""), "new") == "new");
  BOOST_TEST(admit_run("d", RunDirContents{}, request(Mode::kAuto), "new") == "new");  // the first start
  // Requeued before its first checkpoint: the same run starts again.
  BOOST_TEST(admit_run("d", holding("runs.log", "abc"), request(Mode::kAuto), "new") == "abc");
  // Checkpoints that are all invalid would be pruned by a fresh start: refused.
  BOOST_TEST(error_of<UsageError>([] {
               admit_run("d", holding("checkpoints/", "abc", true), request(Mode::kAuto), "new");
             }).find("no valid checkpoint, but checkpoints/ is not empty") != std::string::npos);
  BOOST_TEST(error_of<UsageError>([] {
               admit_run("d", holding("runs.log", "abc"), request(Mode::kAuto, true, "zzz"), "new");
             }).find("belongs to run zzz, the directory to run abc") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(resume_path_writes_only_into_a_new_directory_or_the_same_run) {
  BOOST_TEST(admit_run("B", RunDirContents{}, request(Mode::kPath, true, "abc"), "new") == "abc");
  BOOST_TEST(admit_run("B", RunDirContents{}, request(Mode::kPath, true, ""), "new") == "new");  // version 1
  BOOST_TEST(admit_run("B", holding("metrics.csv", "abc"), request(Mode::kPath, true, "abc"), "new") == "abc");
  // B holds another finished run: refused (it used to lose B's rows and checkpoints, and exit 0).
  const std::string e = error_of<UsageError>([] {
    admit_run("B", holding("metrics.csv", "other"), request(Mode::kPath, true, "abc"), "new");
  });
  BOOST_TEST(e.find("B: holds another run (metrics.csv, run id other) than the checkpoint's (run id abc)") !=
                 std::string::npos,
             e);
  // Before run ids: a checkpoint resumed into its own directory is its own run; elsewhere it is not.
  BOOST_TEST(admit_run("A", holding("metrics.csv", ""), request(Mode::kPath, true, "", true), "new") == "new");
  BOOST_TEST(admit_run("A", holding("metrics.csv", "abc"), request(Mode::kPath, true, "", true), "new") == "abc");
  BOOST_CHECK_THROW(admit_run("B", holding("metrics.csv", ""), request(Mode::kPath, true, "", false), "new"),
                    UsageError);
}

BOOST_AUTO_TEST_CASE(run_ids_are_random_hex) {
  const std::string a = new_run_id(), b = new_run_id();
  BOOST_TEST(a.size() == 32u);
  BOOST_TEST(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  BOOST_TEST(a != b);
}

BOOST_AUTO_TEST_CASE(a_claim_creates_the_directory_locks_it_and_records_the_run) {
  TempDir tmp;
  const std::string dir = tmp.file("runs/a");
  RunDirectory first(dir);
  const std::string id = first.claim(request(Mode::kNone));
  BOOST_TEST(read(dir + "/run_id") == id);
  BOOST_TEST(read(dir + "/run.lock").find("pid " + std::to_string(::getpid())) == 0u);

  // A second run on the same directory, even with --resume auto, meets the lock and names its holder.
  RunDirectory second(dir);
  const std::string e = error_of<UsageError>([&] { second.claim(request(Mode::kAuto)); });
  BOOST_TEST(e.find(dir + ": in use by another run (pid " + std::to_string(::getpid())) == 0u, e);
}

BOOST_AUTO_TEST_CASE(the_lock_goes_with_its_holder) {
  TempDir tmp;
  const std::string dir = tmp.file("run");
  { RunDirectory first(dir); first.claim(request(Mode::kNone)); }
  // Gone (here: destroyed; a killed process the same: the kernel drops its flock). A requeued start
  // with --resume auto takes the directory and keeps the run id.
  const std::string id = read(dir + "/run_id");
  RunDirectory again(dir);
  BOOST_TEST(again.claim(request(Mode::kAuto)) == id);
}

BOOST_AUTO_TEST_CASE(a_refused_claim_creates_nothing) {
  TempDir tmp;
  const std::string dir = tmp.file("old");
  std::filesystem::create_directories(dir + "/checkpoints");
  write(dir + "/checkpoints/ckpt-e0001-s00000010.h5", "x");
  RunDirectory run(dir);
  BOOST_CHECK_THROW(run.claim(request(Mode::kNone)), UsageError);
  BOOST_TEST(!std::filesystem::exists(dir + "/run.lock"));
  BOOST_TEST(!std::filesystem::exists(dir + "/run_id"));
}

BOOST_AUTO_TEST_CASE(a_fifo_as_the_lock_or_the_run_id_never_blocks) {
  TempDir tmp;
  const std::string dir = tmp.file("fifo");
  std::filesystem::create_directories(dir);
  BOOST_REQUIRE(::mkfifo((dir + "/run.lock").c_str(), 0644) == 0);
  RunDirectory run(dir);
  BOOST_TEST(error_of<IoError>([&] { run.claim(request(Mode::kNone)); }).find("run.lock") != std::string::npos);
  const std::string dir2 = tmp.file("fifo2");
  std::filesystem::create_directories(dir2);
  BOOST_REQUIRE(::mkfifo((dir2 + "/run_id").c_str(), 0644) == 0);
  RunDirectory run2(dir2);
  BOOST_TEST(error_of<IoError>([&] { run2.inspect(); }).find("run_id: is a FIFO") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_trace_never_overwrites_and_is_checked_before_the_run_starts) {
  TempDir tmp;
  check_trace_target("", tmp.file("run"));              // no trace: nothing to check
  check_trace_target(tmp.file("t.json"), tmp.file("run"));  // new file in an existing directory
  check_trace_target(tmp.file("run/t.json"), tmp.file("run"));  // inside the run directory, made later
  write(tmp.file("old.json"), "{}");
  BOOST_TEST(error_of<UsageError>([&] { check_trace_target(tmp.file("old.json"), tmp.file("run")); })
                 .find("the file exists; a trace never overwrites a file") != std::string::npos);
  BOOST_TEST(error_of<IoError>([&] { check_trace_target(tmp.file("none/t.json"), tmp.file("run")); })
                 .find("cannot use directory") != std::string::npos);
  write(tmp.file("plain"), "x");
  BOOST_TEST(error_of<IoError>([&] { check_trace_target(tmp.file("plain/t.json"), tmp.file("run")); })
                 .find("is not a directory") != std::string::npos);
}
