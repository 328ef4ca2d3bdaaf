#include "cnn/run_log.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "cnn/errors.hpp"

namespace cnn {

namespace {

constexpr const char* kMetricsHeader =
    "epoch,train_loss,test_loss,test_accuracy,images_per_s,epoch_seconds,wall_seconds";
constexpr const char* kTimingHeader = "epoch,phase,min_s,mean_s,max_s,max_rank";

bool exists(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0;
}

// mkdir -p
void make_directories(const std::string& path) {
  std::string partial;
  std::size_t position = 0;
  while (position != std::string::npos) {
    position = path.find('/', position + 1);
    partial = path.substr(0, position);
    if (partial.empty() || exists(partial)) continue;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      throw IoError(partial + ": cannot create directory: " + std::strerror(errno));
  }
  struct stat info {};
  if (stat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
    throw IoError(path + ": not a directory");
}

void append_line(const std::string& path, const char* header, const std::string& line) {
  const bool fresh = !exists(path);
  std::ofstream out(path, std::ios::app);
  if (!out) throw IoError(path + ": cannot open for appending: " + std::strerror(errno));
  if (fresh) out << header << '\n';
  out << line;
  out.flush();
  if (!out) throw IoError(path + ": write failed: " + std::strerror(errno));
}

}  // namespace

void RunLog::prepare() const {
  make_directories(run_dir_);
  if (exists(metrics_path()))
    throw UsageError(run_dir_ + ": already holds a run (metrics.csv); choose another --out");
  // access(W_OK) is not enough: it ignores read-only mounts and quotas. Create a file.
  const std::string probe = run_dir_ + "/.write-probe";
  std::FILE* file = std::fopen(probe.c_str(), "w");
  if (file == nullptr) throw IoError(run_dir_ + ": not writable: " + std::strerror(errno));
  std::fclose(file);
  std::remove(probe.c_str());
}

void RunLog::append_epoch(const EpochMetrics& m, const std::vector<PhaseSpread>& phases) const {
  std::ostringstream metrics;
  metrics << std::setprecision(9) << m.epoch << ',' << m.train_loss << ',' << m.test_loss << ',' << m.test_accuracy
          << ',' << m.images_per_second << ',' << m.epoch_seconds << ',' << m.wall_seconds << '\n';
  append_line(metrics_path(), kMetricsHeader, metrics.str());
  std::ostringstream timing;
  timing << std::setprecision(6);
  for (const PhaseSpread& p : phases)
    timing << m.epoch << ',' << phase_name(p.phase) << ',' << p.min << ',' << p.mean << ',' << p.max << ','
           << p.max_rank << '\n';
  append_line(timing_path(), kTimingHeader, timing.str());
}

}  // namespace cnn
