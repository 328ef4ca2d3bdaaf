#include "cnn/scaling_report.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cnn/errors.hpp"
#include "cnn/utc_time.hpp"

namespace cnn {
namespace {

constexpr double kPaysSpeedup = 1.25;  // doubling the ranks must speed a step up at least this much

std::string ms(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f ms", 1e3 * seconds);
  return text;
}

std::string pct(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.0f%%", 100.0 * fraction);
  return text;
}

// Ring allreduce traffic per link relative to the buffer: 2(n-1)/n.
double ring_factor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }

double gigabytes_per_second(const AllreduceCost& cost) {
  return cost.seconds_per_byte > 0 ? 1e-9 / cost.seconds_per_byte : 0.0;
}

}  // namespace

ScalingPrediction predict_scaling(const ScalingMeasurements& m) {
  ScalingPrediction p;
  const int n = m.ranks;
  const double step = m.overlap ? m.overlapped : m.plain;
  p.exposed = std::max(0.0, step - m.compute);
  const double allreduce_2n = m.allreduce * ring_factor(2 * n) / ring_factor(n);
  const double exposed_2n = m.allreduce > 0.0 ? p.exposed * allreduce_2n / m.allreduce : 0.0;
  p.efficiency = m.compute / (m.compute + p.exposed);
  p.weak_2n = m.compute / (m.compute + exposed_2n);
  p.speedup_2n = (m.compute + p.exposed) / (m.compute / 2.0 + exposed_2n);
  return p;
}

std::string scaling_report(const ScalingMeasurements& m, const ScalingPrediction& p) {
  const int n = m.ranks;
  std::ostringstream r;
  r << "  scaling advisor: one step's compute " << ms(m.compute) << " (" << m.images_on_rank0 << " images on rank 0)";
  for (const auto& [name, seconds] : m.paths) r << "; allreduce " << name << " " << ms(seconds);
  char size[64];
  std::snprintf(size, sizeof(size), " (%.1f kB)", m.gradient_bytes / 1e3);
  r << size << " -> " << m.path << (m.requested_path == AllreducePath::kAuto ? " (the faster)" : " (--allreduce)")
    << "\n";
  char line[256];
  std::snprintf(line, sizeof(line), "  allreduce model (%s): %.1f us + bytes / %.2f GB/s\n", m.path.c_str(),
                1e6 * m.cost.latency_s, gigabytes_per_second(m.cost));
  r << line;
  if (m.requested_overlap == OverlapChoice::kOff)
    r << "  overlap: off (--overlap off); step " << ms(m.plain) << "\n";
  else
    r << "  overlap: " << (m.overlap ? "on" : "off") << m.overlap_reason << "; " << m.plan_text << "; step "
      << ms(m.overlapped) << " overlapped vs " << ms(m.plain) << " plain\n";
  r << "  predicted parallel efficiency: " << pct(p.efficiency) << " at " << n << " ranks (compute / (compute + "
    << "the step's wait beyond it " << ms(p.exposed) << ")); at " << 2 * n << " ranks " << pct(p.weak_2n)
    << " with the same batch per rank, step x";
  std::snprintf(line, sizeof(line), "%.2f", p.speedup_2n);
  r << line << " faster with the same global batch\n";
  if (p.speedup_2n < kPaysSpeedup || p.efficiency < 0.5)
    r << "  WARNING: adding ranks will not pay at this global batch: " << 2 * n << " ranks would make a step only x"
      << line << " faster (allreduce " << ms(m.allreduce) << " against compute " << ms(m.compute)
      << " per step); use a larger --batch or fewer ranks\n";
  return r.str();
}

void append_scaling_log(const std::string& run_dir, const ScalingMeasurements& m, const ScalingPrediction& p) {
  std::ofstream log(run_dir + "/scaling.log", std::ios::app);
  char line[256];
  std::snprintf(line, sizeof(line), "%.6f", m.compute);
  log << utc_time() << ", ranks=" << m.ranks << ", compute_s=" << line;
  for (const auto& [name, seconds] : m.paths) {
    std::snprintf(line, sizeof(line), "%.6f", seconds);
    log << ", allreduce_" << name << "_s=" << line;
  }
  std::snprintf(line, sizeof(line),
                ", latency_s=%.3g, GBps=%.3g, exposed_s=%.6f, efficiency=%.3f, efficiency_2n_weak=%.3f, "
                "speedup_2n_strong=%.3f",
                m.cost.latency_s, gigabytes_per_second(m.cost), p.exposed, p.efficiency, p.weak_2n, p.speedup_2n);
  log << ", path=" << m.path << " (" << allreduce_name(m.requested_path) << "), overlap=" << (m.overlap ? "on" : "off")
      << " (" << overlap_name(m.requested_overlap) << "), buckets=" << m.buckets << line << '\n';
  if (!log) throw IoError(run_dir + "/scaling.log: write failed");
}

}  // namespace cnn
