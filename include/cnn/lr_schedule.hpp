// The learning rate of every update of a run: --lr-schedule and --warmup-steps (docs/TRAINING.md).
//
// The lr is a pure function of the global step (the 0-based index of the update being applied),
// computed in double on the host and rounded to float once, so it is the same on every rank and
// backend, and a resumed run continues with the very lr it would have used (bitwise resume). With
// base lr L, S steps per epoch, T = epochs * S steps in the whole run and t the global step:
//   constant            lr(t) = L
//   step:E1,E2,...[/g]  lr(t) = L * g^k, k = #{Ei <= floor(t / S)}: torch's MultiStepLR(milestones=
//                       [E1, E2, ...], gamma=g) stepped once per epoch (g = 0.1 when not given)
//   cosine              lr(t) = L * (1 + cos(pi * t / T)) / 2: torch's CosineAnnealingLR(T_max=T,
//                       eta_min=0) stepped once per update (its closed form)
//   onecycle            torch's OneCycleLR(max_lr=L, total_steps=T) with its defaults pct_start=0.3,
//                       div_factor=25, final_div_factor=1e4, anneal_strategy='cos', three_phase=False:
//                       from L/25 up to L over the steps t <= 0.3*T - 1, then down to L/25/1e4 at
//                       t = T - 1, each by cosine annealing a(start, end, p) = end + (start - end) *
//                       (1 + cos(pi * p)) / 2. Momentum and beta1 are not cycled (cycle_momentum=False).
// --warmup-steps N multiplies the scheduled lr by min(1, (t + 1) / N): the first update uses lr/N and
// update N-1 the full lr (torch: LinearLR(start_factor=1/N, total_iters=N-1) chained with the schedule).
// cosine and onecycle depend on T, so a checkpoint stores it and a resume with other --epochs is refused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cnn {

enum class LrScheduleKind { kConstant, kStep, kCosine, kOneCycle };

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  std::vector<std::int64_t> milestones;  // step: epochs, strictly increasing, each >= 1
  double gamma = 0.1;                    // step: the factor at each milestone (torch's default)
};

// OneCycleLR's parameters (torch's defaults), named for the formula above and the docs.
inline constexpr double kOneCyclePctStart = 0.3;
inline constexpr double kOneCycleDivFactor = 25.0;
inline constexpr double kOneCycleFinalDivFactor = 1e4;

// "constant" | "step:E1,E2,...[/gamma]" | "cosine" | "onecycle"; anything else is a UsageError that
// names --lr-schedule and says what was wrong.
LrSchedule parse_lr_schedule(const std::string& text);
// The canonical text ("step:30,60/0.1"): what the settings block prints, the checkpoint stores and a
// resume compares; parse_lr_schedule(lr_schedule_text(s)) gives s back.
std::string lr_schedule_text(const LrSchedule& schedule);
const char* lr_schedule_name(LrScheduleKind kind);  // "constant", "step", "cosine", "onecycle"
// cosine and onecycle: the lr of a step depends on the run's total step count.
bool depends_on_total_steps(LrScheduleKind kind);

class LearningRate {
 public:
  // steps_per_epoch >= 1, total_steps >= 1 (epochs * steps_per_epoch), warmup_steps >= 0.
  LearningRate(double base_lr, LrSchedule schedule, std::int64_t warmup_steps, std::int64_t steps_per_epoch,
               std::int64_t total_steps);
  // The lr of the update with 0-based global index `step`, in double.
  double at(std::int64_t step) const;
  // That value rounded to float once: what every backend's update uses.
  float at_float(std::int64_t step) const { return static_cast<float>(at(step)); }

 private:
  double scheduled(std::int64_t step) const;
  double one_cycle(std::int64_t step) const;

  double base_lr_;
  LrSchedule schedule_;
  std::int64_t warmup_steps_;
  std::int64_t steps_per_epoch_;
  std::int64_t total_steps_;
};

}  // namespace cnn
