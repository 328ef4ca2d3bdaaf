#include "cnn/run_log.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "cnn/errors.hpp"
#include "io/fsync_util.hpp"

namespace cnn {

namespace {

constexpr const char* kMetricsHeader =
    "epoch,train_loss,test_loss,test_accuracy,images_per_s,epoch_seconds,wall_seconds,skipped_steps";
constexpr const char* kTimingHeader = "epoch,phase,min_s,mean_s,max_s,max_rank";
constexpr const char* kAllreduceHeader =
    "epoch,ranks,bytes_per_step,steps,mean_s,algbw_GBps,busbw_GBps,overlap,buckets,exposed_s,overlap_fraction";
// timing.csv's row of the measured step wall time; not a Phase, so that phases sum to it.
constexpr const char* kStepRowName = "step";

bool exists(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0;
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

// Keeps the header and the rows whose first column (the epoch) is at most `last_epoch`, replacing
// the file atomically: a crash mid-rewrite leaves the old file, never a half-written one.
void keep_rows_up_to(const std::string& path, std::int64_t last_epoch) {
  if (!exists(path)) return;
  std::ifstream in(path);
  if (!in) throw IoError(path + ": cannot open for reading: " + std::strerror(errno));
  std::string kept, line;
  bool header = true;
  bool dropped = false;
  while (std::getline(in, line)) {
    if (header) {
      header = false;
      kept += line + '\n';
      continue;
    }
    char* end = nullptr;
    const long long epoch = std::strtoll(line.c_str(), &end, 10);
    if (end == line.c_str() || *end != ',' || epoch > last_epoch) {
      dropped = true;
      continue;
    }
    kept += line + '\n';
  }
  if (!dropped) return;
  fsutil::write_text_durably(path, kept);
}

void prove_writable(const std::string& run_dir) {
  // access(W_OK) is not enough: it ignores read-only mounts and quotas. Create a file.
  const std::string probe = run_dir + "/.write-probe";
  std::FILE* file = std::fopen(probe.c_str(), "w");
  if (file == nullptr) throw IoError(run_dir + ": not writable: " + std::strerror(errno));
  std::fclose(file);
  std::remove(probe.c_str());
}

}  // namespace

void RunLog::prepare_resume(std::int64_t completed_epochs) const {
  fsutil::make_directories(run_dir_);
  prove_writable(run_dir_);
  keep_rows_up_to(metrics_path(), completed_epochs);
  keep_rows_up_to(timing_path(), completed_epochs);
  keep_rows_up_to(allreduce_path(), completed_epochs);
}

void RunLog::append_start(const std::string& line) const {
  std::ofstream out(runs_path(), std::ios::app);
  if (!out) throw IoError(runs_path() + ": cannot open for appending: " + std::strerror(errno));
  out << line << '\n';
  out.flush();
  if (!out) throw IoError(runs_path() + ": write failed: " + std::strerror(errno));
}

void RunLog::prepare() const {
  fsutil::make_directories(run_dir_);
  // RunDirectory::claim refused an earlier run already; this keeps the logs' own promise on their own.
  if (exists(metrics_path()))
    throw UsageError(run_dir_ + ": already holds a run (metrics.csv); choose another --out, or continue it with "
                     "--resume auto");
  prove_writable(run_dir_);
}

void RunLog::append_epoch(const EpochMetrics& m, const std::vector<PhaseSpread>& phases) const {
  std::ostringstream metrics;
  metrics << std::setprecision(9) << m.epoch << ',' << m.train_loss << ',' << m.test_loss << ',' << m.test_accuracy
          << ',' << m.images_per_second << ',' << m.epoch_seconds << ',' << m.wall_seconds << ',' << m.skipped_steps
          << '\n';
  append_line(metrics_path(), kMetricsHeader, metrics.str());
  std::ostringstream timing;
  timing << std::setprecision(6);
  for (const PhaseSpread& p : phases)
    timing << m.epoch << ',' << phase_name(p.phase) << ',' << p.min << ',' << p.mean << ',' << p.max << ','
           << p.max_rank << '\n';
  append_line(timing_path(), kTimingHeader, timing.str());
}

void RunLog::append_epoch(const EpochMetrics& m, const std::vector<PhaseSpread>& phases, const RankSpread& step) const {
  append_epoch(m, phases);
  std::ostringstream row;
  row << std::setprecision(6) << m.epoch << ',' << kStepRowName << ',' << step.min << ',' << step.mean << ','
      << step.max << ',' << step.max_rank << '\n';
  append_line(timing_path(), kTimingHeader, row.str());
}

void RunLog::append_allreduce(const AllreduceStats& a) const {
  std::ostringstream row;
  row << std::setprecision(6) << a.epoch << ',' << a.ranks << ',' << a.bytes_per_step << ',' << a.steps << ','
      << a.mean_s << ',' << a.algbw_GBps << ',' << a.busbw_GBps << ',' << a.overlap << ',' << a.buckets << ','
      << a.exposed_s << ',' << a.overlap_fraction << '\n';
  append_line(allreduce_path(), kAllreduceHeader, row.str());
}

}  // namespace cnn
