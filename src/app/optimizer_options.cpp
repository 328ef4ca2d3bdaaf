#include "app/optimizer_options.hpp"

#include <cmath>
#include <limits>
#include <sstream>

#include "cnn/errors.hpp"

namespace cnn {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

std::string str(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// 0, or a positive number whose float (what the update uses) is a normal float: 1e-50 would be 0 as
// a float, a decay the user asked for that would silently do nothing.
bool zero_or_positive_float(double value) {
  const auto f = static_cast<float>(value);
  return std::isfinite(value) && std::isfinite(f) && (value == 0.0 || f >= std::numeric_limits<float>::min());
}

}  // namespace

void validate_optimizer_options(TrainConfig& c, const std::string& lr_schedule_text) {
  c.lr_schedule = parse_lr_schedule(lr_schedule_text);  // throws UsageError naming --lr-schedule
  require(c.warmup_steps >= 0, "--warmup-steps must be 0 (none) or positive (got " + std::to_string(c.warmup_steps) +
                                   ")");
  require(c.warmup_steps == 0 || c.lr_schedule.kind != LrScheduleKind::kOneCycle,
          "--warmup-steps with --lr-schedule onecycle: onecycle warms up by itself (its first 30% of the steps)");
  require(zero_or_positive_float(c.weight_decay),
          "--weight-decay must be 0 (off) or a positive number that a float can hold (got " + str(c.weight_decay) +
              ")");
  require(!c.nesterov || c.optimizer == OptimizerKind::kMomentum,
          std::string("--nesterov needs --optimizer momentum (got ") + optimizer_name(c.optimizer) + ")");
  require(!c.nesterov || c.momentum > 0.0, "--nesterov needs a --momentum above 0 (got " + str(c.momentum) + ")");
  require(std::isfinite(c.label_smoothing) && c.label_smoothing >= 0.0 && c.label_smoothing <= 1.0,
          "--label-smoothing must be in [0, 1] (got " + str(c.label_smoothing) + ")");
}

std::string describe_optimizer_options(const TrainConfig& c) {
  std::ostringstream text;
  text << "  lr_schedule: " << lr_schedule_text(c.lr_schedule);
  if (c.warmup_steps > 0) text << ", warm-up " << c.warmup_steps << " steps";
  text << "\n";
  if (c.weight_decay > 0.0)
    text << "  weight_decay: " << c.weight_decay
         << (c.optimizer == OptimizerKind::kAdamW ? " (decoupled)" : " (L2, added to the gradient)") << "\n";
  if (c.label_smoothing > 0.0) text << "  label_smoothing: " << c.label_smoothing << "\n";
  return text.str();
}

}  // namespace cnn
