// --lr-schedule's parser and the lr of each step (include/cnn/lr_schedule.hpp has the formulas).
#include "cnn/lr_schedule.hpp"

#include <charconv>
#include <cmath>
#include <limits>

#include "cnn/errors.hpp"

namespace cnn {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr const char* kForms = "constant, step:E1,E2,...[/GAMMA], cosine or onecycle";

[[noreturn]] void refuse(const std::string& text, const std::string& why) {
  throw UsageError("--lr-schedule '" + text + "': " + why + " (expected " + kForms + ")");
}

// The shortest text that reads back as the same double.
std::string shortest(double value) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof(text), value);
  return error == std::errc() ? std::string(text, end) : std::string("?");
}

std::vector<std::int64_t> parse_milestones(const std::string& text, const std::string& list) {
  std::vector<std::int64_t> milestones;
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = list.find(',', begin);
    const std::string item = list.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    std::int64_t epoch = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), epoch);
    if (item.empty() || error != std::errc() || end != item.data() + item.size())
      refuse(text, "milestone '" + item + "' is not a whole number of epochs");
    if (epoch < 1) refuse(text, "milestone " + item + " is not a positive epoch");
    if (!milestones.empty() && epoch <= milestones.back())
      refuse(text, "milestones must increase (" + std::to_string(milestones.back()) + " then " + item + ")");
    milestones.push_back(epoch);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return milestones;
}

double parse_gamma(const std::string& text, const std::string& word) {
  double gamma = 0.0;
  const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), gamma);
  if (word.empty() || error != std::errc() || end != word.data() + word.size())
    refuse(text, "gamma '" + word + "' is not a number");
  // The lr is a float in the update: a factor that makes it 0, infinite or NaN trains nothing.
  if (!std::isfinite(gamma) || gamma <= 0.0 || !std::isfinite(static_cast<float>(gamma)) ||
      static_cast<float>(gamma) < std::numeric_limits<float>::min())
    refuse(text, "gamma must be a positive number that a float can hold (got " + word + ")");
  return gamma;
}

}  // namespace

LrSchedule parse_lr_schedule(const std::string& text) {
  LrSchedule schedule;
  if (text == "constant") return schedule;
  if (text == "cosine") {
    schedule.kind = LrScheduleKind::kCosine;
    return schedule;
  }
  if (text == "onecycle") {
    schedule.kind = LrScheduleKind::kOneCycle;
    return schedule;
  }
  const std::string prefix = "step:";
  if (text.compare(0, prefix.size(), prefix) != 0) refuse(text, "unknown schedule");
  schedule.kind = LrScheduleKind::kStep;
  const std::string rest = text.substr(prefix.size());
  const std::size_t slash = rest.find('/');
  schedule.milestones = parse_milestones(text, rest.substr(0, slash));
  if (slash != std::string::npos) schedule.gamma = parse_gamma(text, rest.substr(slash + 1));
  return schedule;
}

std::string lr_schedule_text(const LrSchedule& schedule) {
  if (schedule.kind != LrScheduleKind::kStep) return lr_schedule_name(schedule.kind);
  std::string text = "step:";
  for (std::size_t i = 0; i < schedule.milestones.size(); ++i)
    text += (i ? "," : "") + std::to_string(schedule.milestones[i]);
  return text + "/" + shortest(schedule.gamma);
}

const char* lr_schedule_name(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::kConstant: return "constant";
    case LrScheduleKind::kStep: return "step";
    case LrScheduleKind::kCosine: return "cosine";
    case LrScheduleKind::kOneCycle: return "onecycle";
  }
  return "?";
}

bool depends_on_total_steps(LrScheduleKind kind) {
  return kind == LrScheduleKind::kCosine || kind == LrScheduleKind::kOneCycle;
}

LearningRate::LearningRate(double base_lr, LrSchedule schedule, std::int64_t warmup_steps,
                           std::int64_t steps_per_epoch, std::int64_t total_steps)
    : base_lr_(base_lr), schedule_(std::move(schedule)), warmup_steps_(warmup_steps),
      steps_per_epoch_(steps_per_epoch < 1 ? 1 : steps_per_epoch), total_steps_(total_steps < 1 ? 1 : total_steps) {}

double LearningRate::at(std::int64_t step) const {
  const double lr = scheduled(step);
  if (step >= warmup_steps_) return lr;
  return lr * (static_cast<double>(step + 1) / static_cast<double>(warmup_steps_));
}

double LearningRate::scheduled(std::int64_t step) const {
  switch (schedule_.kind) {
    case LrScheduleKind::kConstant: return base_lr_;
    case LrScheduleKind::kStep: {
      const std::int64_t epoch = step / steps_per_epoch_;
      int passed = 0;
      for (const std::int64_t milestone : schedule_.milestones) passed += milestone <= epoch ? 1 : 0;
      return base_lr_ * std::pow(schedule_.gamma, passed);
    }
    case LrScheduleKind::kCosine:
      return base_lr_ * (1.0 + std::cos(kPi * static_cast<double>(step) / static_cast<double>(total_steps_))) / 2.0;
    case LrScheduleKind::kOneCycle: return one_cycle(step);
  }
  return base_lr_;
}

// torch.optim.lr_scheduler.OneCycleLR.get_lr, two phases, written the way it is there.
double LearningRate::one_cycle(std::int64_t step) const {
  const double initial = base_lr_ / kOneCycleDivFactor;
  const double minimum = initial / kOneCycleFinalDivFactor;
  const auto anneal = [](double start, double end, double pct) {
    return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1.0);
  };
  const double t = static_cast<double>(step);
  const double warm_end = kOneCyclePctStart * static_cast<double>(total_steps_) - 1.0;
  if (t <= warm_end) return anneal(initial, base_lr_, t / warm_end);
  const double last = static_cast<double>(total_steps_ - 1);
  return anneal(base_lr_, minimum, (t - warm_end) / (last - warm_end));
}

}  // namespace cnn
