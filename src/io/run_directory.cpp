#include "cnn/run_directory.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "cnn/errors.hpp"
#include "cnn/run_settings_file.hpp"
#include "cnn/utc_time.hpp"
#include "io/fsync_util.hpp"
#include "io/regular_file.hpp"

namespace cnn {
namespace {

constexpr const char* kLockName = "run.lock";
constexpr const char* kRunIdName = "run_id";
constexpr const char* kCheckpointSubdir = "checkpoints";
constexpr std::size_t kRunIdBytes = 16;
constexpr std::size_t kSmallFileBytes = 4096;  // the lock's holder line and the run id are one line each
// Files any run writes into its directory, in the order a message names them.
constexpr const char* kRunFiles[] = {"metrics.csv", "runs.log", "timing.csv", "allreduce.csv", "scaling.log", kRunIdName,
                                     kRunSettingsName};

bool exists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

// A one-line file such as run_id, or "" when absent. Never blocks (a FIFO in its place is refused).
std::string read_line(const std::string& path) {
  if (!exists(path)) return "";
  const fsutil::ReadFd fd = fsutil::open_regular_file(path);
  char buffer[kSmallFileBytes];
  const ssize_t got = ::read(fd.get(), buffer, sizeof(buffer));
  if (got < 0) throw IoError(path + ": read failed: " + fsutil::errno_text(errno));
  std::string line(buffer, static_cast<std::size_t>(got));
  if (const std::size_t end = line.find('\n'); end != std::string::npos) line.resize(end);
  return line;
}

// Whether `dir` holds anything. A file where the directory belongs would make every checkpoint write
// fail: refused now, before the run creates anything.
bool directory_has_entries(const std::string& dir) {
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) return false;
  if (!S_ISDIR(info.st_mode)) throw IoError(dir + ": exists and is not a directory");
  std::error_code error;
  std::filesystem::directory_iterator it(dir, error);
  if (error) throw IoError(dir + ": cannot list directory: " + error.message());
  return it != std::filesystem::directory_iterator();
}

std::string canonical(const std::string& path) {
  std::error_code ignored;
  return std::filesystem::weakly_canonical(std::filesystem::path(path), ignored).string();
}

std::string host_name() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// The id a continued run keeps: the directory's, else the checkpoint's, else a new one (directories
// and checkpoints from before run ids).
std::string continued_id(const RunDirContents& c, const ResumeRequest& r, const std::string& fresh_id) {
  if (!c.run_id.empty()) return c.run_id;
  return r.checkpoint_run_id.empty() ? fresh_id : r.checkpoint_run_id;
}

std::string known(const std::string& id) { return id.empty() ? std::string("unknown") : id; }

}  // namespace

std::string admit_run(const std::string& dir, const RunDirContents& c, const ResumeRequest& r,
                      const std::string& fresh_id) {
  using Mode = ResumeRequest::Mode;
  switch (r.mode) {
    case Mode::kNone:
      if (!c.earlier_run.empty())
        throw UsageError(dir + ": already holds a run (" + c.earlier_run +
                         "); choose another --out, or continue it with --resume auto");
      return fresh_id;
    case Mode::kAuto:
      // Starting afresh would prune the checkpoints that are there, usable or not.
      if (!r.resumed && c.has_checkpoints)
        throw UsageError(dir + ": --resume auto found no valid checkpoint, but checkpoints/ is not empty; "
                               "refusing to start afresh over it (move it away, or give --resume PATH)");
      if (!c.run_id.empty() && !r.checkpoint_run_id.empty() && c.run_id != r.checkpoint_run_id)
        throw UsageError(dir + ": its newest valid checkpoint belongs to run " + r.checkpoint_run_id +
                         ", the directory to run " + c.run_id + "; resume it with --resume PATH into a new --out");
      return continued_id(c, r, fresh_id);
    case Mode::kPath:
      break;
  }
  const bool same_run = !c.run_id.empty() && c.run_id == r.checkpoint_run_id;
  // Before run ids, a checkpoint's own directory is its run.
  const bool own_directory = r.checkpoint_in_out && (c.run_id.empty() || r.checkpoint_run_id.empty());
  if (c.earlier_run.empty() || same_run || own_directory) return continued_id(c, r, fresh_id);
  throw UsageError(dir + ": holds another run (" + c.earlier_run + ", run id " + known(c.run_id) +
                   ") than the checkpoint's (run id " + known(r.checkpoint_run_id) +
                   "); --resume PATH writes only into a new --out or the checkpoint's own run");
}

std::string new_run_id() {
  unsigned char bytes[kRunIdBytes];
  std::size_t done = 0;
  while (done < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + done, sizeof(bytes) - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_call("libc", "getrandom", fsutil::errno_text(errno), __FILE__, __LINE__);
    done += static_cast<std::size_t>(n);
  }
  std::string id;
  char hex[3];
  for (const unsigned char b : bytes) {
    std::snprintf(hex, sizeof(hex), "%02x", b);
    id += hex;
  }
  return id;
}

void check_trace_target(const std::string& trace, const std::string& run_dir) {
  if (trace.empty()) return;
  struct stat info {};
  if (::lstat(trace.c_str(), &info) == 0)
    throw UsageError("--trace " + trace + ": the file exists; a trace never overwrites a file (choose another name)");
  const std::string parent = fsutil::parent_dir(trace);
  if (canonical(parent) == canonical(run_dir)) return;  // the run creates it
  if (::stat(parent.c_str(), &info) != 0)
    throw IoError("--trace " + trace + ": cannot use directory " + parent + ": " + fsutil::errno_text(errno));
  if (!S_ISDIR(info.st_mode)) throw IoError("--trace " + trace + ": " + parent + " is not a directory");
  // access(2) reports read-only file systems (EROFS) too, and writes nothing.
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    throw IoError("--trace " + trace + ": directory " + parent + " is not writable: " + fsutil::errno_text(errno));
}

RunDirectory::RunDirectory(std::string dir) : dir_(std::move(dir)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

RunDirectory::~RunDirectory() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

RunDirContents RunDirectory::inspect() const {
  RunDirContents c;
  struct stat info {};
  if (::stat(dir_.c_str(), &info) != 0) return c;
  c.exists = true;
  if (!S_ISDIR(info.st_mode)) throw IoError(dir_ + ": exists and is not a directory");
  const std::string checkpoints = dir_ + "/" + kCheckpointSubdir;
  c.has_checkpoints = directory_has_entries(checkpoints);
  if (c.has_checkpoints) c.earlier_run = std::string(kCheckpointSubdir) + "/";
  for (const char* name : kRunFiles)
    if (c.earlier_run.empty() && exists(dir_ + "/" + name)) c.earlier_run = name;
  c.run_id = read_line(dir_ + "/" + kRunIdName);
  return c;
}

// Opens (or, with O_CREAT, creates) the lock file and tries to take the lock. False when another
// process holds it. O_NONBLOCK and O_NOFOLLOW: a FIFO or a symbolic link in its place cannot block or
// redirect us.
bool RunDirectory::try_lock(int create_flag) {
  const std::string path = dir_ + "/" + kLockName;
  // flock(2) does not care how the file was opened: the probe before the claim only reads.
  const int access = create_flag != 0 ? O_RDWR : O_RDONLY;
  lock_fd_ = ::open(path.c_str(), access | create_flag | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW, 0644);
  if (lock_fd_ < 0) {
    if (errno == ENOENT && create_flag == 0) return true;  // no lock file: nobody holds it
    throw IoError(path + ": cannot open the run's lock file: " + fsutil::errno_text(errno));
  }
  struct stat info {};
  if (::fstat(lock_fd_, &info) != 0 || !S_ISREG(info.st_mode)) throw IoError(path + ": is not a regular file");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) == 0) return true;
  if (errno != EWOULDBLOCK) throw IoError(path + ": cannot lock: " + fsutil::errno_text(errno));
  ::close(lock_fd_);
  lock_fd_ = -1;
  return false;
}

void RunDirectory::refuse_busy() const {
  std::string holder = read_line(dir_ + "/" + kLockName);
  if (holder.empty()) holder = "a run that is starting";
  throw UsageError(dir_ + ": in use by another run (" + holder + "); wait for it to end, or choose another --out");
}

std::string RunDirectory::claim(const ResumeRequest& request) {
  const std::string fresh_id = new_run_id();
  // A run in progress is the first thing to tell; then whether this start may use the directory at
  // all. Both without creating anything.
  if (inspect().exists) {
    if (!try_lock(0)) refuse_busy();
    if (lock_fd_ >= 0) ::close(lock_fd_);
    lock_fd_ = -1;
  }
  admit_run(dir_, inspect(), request, fresh_id);
  fsutil::make_directories(dir_);
  if (!try_lock(O_CREAT)) refuse_busy();
  // Under the lock: what a run that held it a moment ago may have written counts too.
  const std::string run_id = admit_run(dir_, inspect(), request, fresh_id);
  const std::string lock_path = dir_ + "/" + kLockName;

  const std::string holder = "pid " + std::to_string(::getpid()) + " on " + host_name() + ", since " + utc_time() +
                             ", run id " + run_id + "\n";
  if (::ftruncate(lock_fd_, 0) != 0) throw IoError(lock_path + ": cannot write: " + fsutil::errno_text(errno));
  if (::lseek(lock_fd_, 0, SEEK_SET) != 0) throw IoError(lock_path + ": cannot write: " + fsutil::errno_text(errno));
  fsutil::write_all(lock_fd_, holder, lock_path);
  if (read_line(dir_ + "/" + kRunIdName) != run_id) fsutil::write_text_durably(dir_ + "/" + kRunIdName, run_id + "\n");
  return run_id;
}

}  // namespace cnn
