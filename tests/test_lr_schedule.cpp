// The lr of each step (include/cnn/lr_schedule.hpp) against values computed by hand with PyTorch's
// formulas (MultiStepLR's closed form, CosineAnnealingLR's closed form, OneCycleLR.get_lr as written in
// torch/optim/lr_scheduler.py, evaluated in Python's double), the warm-up factor, and the parser.
#define BOOST_TEST_MODULE lr_schedule
#include <cmath>
#include <string>

#include "boost_test.hpp"
#include "cnn/errors.hpp"
#include "cnn/lr_schedule.hpp"

namespace {

cnn::LearningRate rate(const std::string& schedule, double lr, std::int64_t warmup, std::int64_t per_epoch,
                       std::int64_t total) {
  return cnn::LearningRate(lr, cnn::parse_lr_schedule(schedule), warmup, per_epoch, total);
}

void check_refused(const std::string& text, const std::string& says) {
  try {
    cnn::parse_lr_schedule(text);
    BOOST_ERROR("--lr-schedule '" << text << "' was accepted");
  } catch (const cnn::UsageError& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("--lr-schedule '" + text + "'") == 0, what);
    BOOST_TEST(what.find(says) != std::string::npos, what);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(constant_is_the_lr_at_every_step) {
  const cnn::LearningRate lr = rate("constant", 0.1, 0, 10, 30);
  for (std::int64_t t : {0, 1, 29, 1000}) BOOST_TEST(lr.at(t) == 0.1);
  BOOST_TEST(lr.at_float(5) == 0.1f);
}

// MultiStepLR(milestones=[2, 4], gamma=0.5), stepped per epoch, 10 steps an epoch.
BOOST_AUTO_TEST_CASE(step_multiplies_by_gamma_from_each_milestone_epoch_on) {
  const cnn::LearningRate lr = rate("step:2,4/0.5", 0.1, 0, 10, 60);
  BOOST_TEST(lr.at(0) == 0.1);
  BOOST_TEST(lr.at(19) == 0.1);     // the last step of epoch 1 (0-based)
  BOOST_TEST(lr.at(20) == 0.05);    // epoch 2's first step
  BOOST_TEST(lr.at(39) == 0.05);
  BOOST_TEST(lr.at(40) == 0.025);
  BOOST_TEST(lr.at(59) == 0.025);
  const cnn::LearningRate tenth = rate("step:1", 0.1, 0, 10, 30);  // gamma defaults to 0.1, as in torch
  BOOST_TEST(tenth.at(9) == 0.1);
  BOOST_TEST(tenth.at(10) == 0.1 * 0.1);
}

// CosineAnnealingLR(T_max=100, eta_min=0): 0.1 * (1 + cos(pi * t / 100)) / 2.
BOOST_AUTO_TEST_CASE(cosine_anneals_to_zero_over_the_run) {
  const cnn::LearningRate lr = rate("cosine", 0.1, 0, 10, 100);
  const auto tol = boost::test_tools::tolerance(1e-14);
  BOOST_TEST(lr.at(0) == 0.1, tol);
  BOOST_TEST(lr.at(25) == 0.08535533905932738, tol);
  BOOST_TEST(lr.at(50) == 0.05, tol);
  BOOST_TEST(lr.at(99) == 2.467198171342e-05, boost::test_tools::tolerance(1e-11));
}

// OneCycleLR(max_lr=1, total_steps=100): pct_start 0.3, div_factor 25, final_div_factor 1e4, cosine.
BOOST_AUTO_TEST_CASE(onecycle_is_torchs_two_phases) {
  const cnn::LearningRate lr = rate("onecycle", 1.0, 0, 10, 100);
  const auto tol = boost::test_tools::tolerance(1e-12);
  BOOST_TEST(lr.at(0) == 0.040000000000000036, tol);  // max_lr / 25
  BOOST_TEST(lr.at(14) == 0.49401332387899954, tol);
  BOOST_TEST(lr.at(29) == 1.0, tol);                   // the peak, at float(0.3 * 100) - 1
  BOOST_TEST(lr.at(30) == 0.9994965352845243, tol);
  BOOST_TEST(lr.at(64) == 0.500002, tol);
  BOOST_TEST(lr.at(99) == 4e-06, tol);                 // max_lr / 25 / 1e4 at the last step
  // A run shorter than 1 / pct_start steps: the warm phase ends before step 0 (torch: the same).
  const cnn::LearningRate short_run = rate("onecycle", 0.5, 0, 3, 3);
  BOOST_TEST(short_run.at(0) == 0.49720771772545586, tol);
  BOOST_TEST(short_run.at(1) == 0.23131855133348753, tol);
  BOOST_TEST(short_run.at(2) == 2e-06, tol);
}

// The scheduled lr times min(1, (t + 1) / N).
BOOST_AUTO_TEST_CASE(warmup_multiplies_the_schedule_linearly) {
  const cnn::LearningRate lr = rate("constant", 0.4, 4, 10, 100);
  BOOST_TEST(lr.at(0) == 0.1);
  BOOST_TEST(lr.at(1) == 0.2);
  BOOST_TEST(lr.at(3) == 0.4);
  BOOST_TEST(lr.at(4) == 0.4);
  const cnn::LearningRate cosine = rate("cosine", 0.1, 10, 10, 100);
  BOOST_TEST(cosine.at(4) == 0.5 * 0.1 * (1 + std::cos(3.14159265358979323846 * 4 / 100)) / 2,
             boost::test_tools::tolerance(1e-14));
  BOOST_TEST(cosine.at(50) == 0.05, boost::test_tools::tolerance(1e-14));
}

BOOST_AUTO_TEST_CASE(schedule_texts_are_canonical_and_read_back) {
  BOOST_TEST(cnn::lr_schedule_text(cnn::parse_lr_schedule("step:30,60")) == "step:30,60/0.1");
  BOOST_TEST(cnn::lr_schedule_text(cnn::parse_lr_schedule("step:5/0.25")) == "step:5/0.25");
  BOOST_TEST(cnn::lr_schedule_text(cnn::parse_lr_schedule("cosine")) == "cosine");
  BOOST_TEST(cnn::lr_schedule_text(cnn::parse_lr_schedule("onecycle")) == "onecycle");
  BOOST_TEST(cnn::lr_schedule_text(cnn::parse_lr_schedule("constant")) == "constant");
  const cnn::LrSchedule s = cnn::parse_lr_schedule("step:3,7,9/0.3");
  BOOST_TEST(cnn::lr_schedule_text(cnn::parse_lr_schedule(cnn::lr_schedule_text(s))) == "step:3,7,9/0.3");
  BOOST_TEST(cnn::depends_on_total_steps(cnn::LrScheduleKind::kCosine));
  BOOST_TEST(cnn::depends_on_total_steps(cnn::LrScheduleKind::kOneCycle));
  BOOST_TEST(!cnn::depends_on_total_steps(cnn::LrScheduleKind::kStep));
  BOOST_TEST(!cnn::depends_on_total_steps(cnn::LrScheduleKind::kConstant));
}

BOOST_AUTO_TEST_CASE(bad_schedules_are_refused_in_one_line) {
  check_refused("linear", "unknown schedule");
  check_refused("step:", "milestone '' is not a whole number");
  check_refused("step:3,x", "milestone 'x' is not a whole number");
  check_refused("step:0", "milestone 0 is not a positive epoch");
  check_refused("step:5,5", "milestones must increase (5 then 5)");
  check_refused("step:5,3", "milestones must increase");
  check_refused("step:5/0", "gamma must be a positive number");
  check_refused("step:5/nan", "gamma must be a positive number");
  check_refused("step:5/1e-50", "gamma must be a positive number");
  check_refused("step:5/abc", "gamma 'abc' is not a number");
  check_refused("Cosine", "unknown schedule");
}
