#include "cnn/run_settings_file.hpp"

#include <sys/stat.h>

#include "cnn/errors.hpp"
#include "io/fsync_util.hpp"

namespace cnn {
namespace {

// More resumes than any run makes; a directory with this many settings files is not left to grow.
constexpr int kMaxResumeFiles = 100000;

bool exists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;  // a link, a FIFO or a directory there counts too
}

}  // namespace

std::string write_run_settings(const std::string& run_dir, const std::string& text) {
  std::string path = run_dir + "/" + kRunSettingsName;
  for (int n = 1; exists(path); ++n) {
    if (n > kMaxResumeFiles) throw IoError(run_dir + ": holds " + std::to_string(kMaxResumeFiles) + " config.resume-N.toml files; "
                                           "move them away to resume this run");
    path = run_dir + "/config.resume-" + std::to_string(n) + ".toml";
  }
  // The run's lock keeps other runs out, so the name found free stays free; the temporary is created
  // new (O_EXCL) after any stale one from a killed start is removed, never written through a link.
  const std::string tmp = path + ".tmp";
  if (const int err = fsutil::remove_if_present(tmp); err != 0)
    throw IoError(tmp + ": cannot remove a stale temporary: " + fsutil::errno_text(err));
  try {
    fsutil::write_new_file(tmp, text);
    fsutil::rename_durably(tmp, path);
  } catch (...) {
    fsutil::remove_if_present(tmp);  // best effort: the first error is the one to report
    throw;
  }
  return path;
}

}  // namespace cnn
