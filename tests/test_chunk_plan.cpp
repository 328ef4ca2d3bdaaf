// --steps-per-launch (include/cnn/chunk_plan.hpp): when the loop hands the backend chunks of steps
// and the settings line that says so (auto: the path its measurement found faster, with both times);
// where a chunk must end (the epoch, the cap, a checkpoint due, the stop hook, a short last batch);
// and each step's optimizer settings as the one-step loop sets them.
#define BOOST_TEST_MODULE chunk_plan
#include "boost_test.hpp"

#include "cnn/chunk_plan.hpp"

using namespace cnn;

namespace {

ChunkConditions one_rank(std::int64_t steps_per_launch, const std::string& kernel_unsupported = "") {
  ChunkConditions c;
  c.steps_per_launch = steps_per_launch;
  c.steps_per_epoch = 600;
  c.kernel_unsupported = kernel_unsupported;
  return c;
}

ChunkBounds epoch_of(std::int64_t step, std::int64_t cap) {
  ChunkBounds b;
  b.step = step;
  b.steps_per_epoch = 21;
  b.cap = cap;
  b.train_count = 2050;  // 20 batches of 100 and a short one of 50
  b.batch = 100;
  b.global_step = 100 + step;
  return b;
}

}  // namespace

BOOST_AUTO_TEST_CASE(auto_chunks_only_inside_one_kernel) {
  const ChunkPlan kernel = plan_chunks(one_rank(0));
  BOOST_TEST(kernel.chunked());
  BOOST_TEST(kernel.cap == 0);
  BOOST_TEST(kernel.describe == "up to 600 (persistent kernel)");
  const ChunkPlan none = plan_chunks(one_rank(0, "the seq backend runs one step per kernel launch"));
  BOOST_TEST(!none.chunked());
  BOOST_TEST(none.describe == "1 (auto: the seq backend runs one step per kernel launch)");
}

BOOST_AUTO_TEST_CASE(auto_takes_the_path_its_measurement_found_faster_and_says_so) {
  ChunkConditions c = one_rank(0);
  c.measured = StepPathMeasurement{0.000130, 0.000134, ""};
  BOOST_TEST(plan_chunks(c).chunked());
  BOOST_TEST(plan_chunks(c).cap == 0);
  BOOST_TEST(plan_chunks(c).describe == "up to 600 (persistent kernel: 0.130 ms a step, one launch per step 0.134 ms, measured)");
  c.measured = StepPathMeasurement{0.000084, 0.000080, ""};
  BOOST_TEST(!plan_chunks(c).chunked());
  BOOST_TEST(plan_chunks(c).describe == "1 (auto: one launch per step measured faster: 0.080 ms a step, the persistent kernel 0.084 ms)");
  c.measured = StepPathMeasurement{0.000080, 0.000080, ""};  // a tie keeps the one-step loop
  BOOST_TEST(!plan_chunks(c).chunked());
  c.measured = StepPathMeasurement{0.0, 0.0, "1 whole step left in the epoch, too few to time the persistent kernel"};
  BOOST_TEST(!plan_chunks(c).chunked());
  BOOST_TEST(plan_chunks(c).describe == "1 (auto: 1 whole step left in the epoch, too few to time the persistent kernel)");
  c = one_rank(0);
  c.ranks = 2;
  c.measured = StepPathMeasurement{0.0025, 0.003, ""};
  BOOST_TEST(plan_chunks(c).describe ==
             "up to 600 (persistent kernel, the gradients summed over the ranks inside it: 2.500 ms a step, one launch per "
             "step 3.000 ms, measured)");
  // What rules chunks out is said as before: the measurement never ran there.
  c.exchange_unsupported = "a pair of GPUs has no peer access";
  BOOST_TEST(plan_chunks(c).describe == "1 (2 ranks: a pair of GPUs has no peer access)");
  // An explicit N never measures; a measurement given anyway changes nothing.
  c = one_rank(7);
  c.measured = StepPathMeasurement{0.000084, 0.000080, ""};
  BOOST_TEST(plan_chunks(c).describe == "up to 7 (persistent kernel)");
}

BOOST_AUTO_TEST_CASE(a_resumed_auto_takes_the_path_its_checkpoint_recorded_and_says_so) {
  ChunkConditions c = one_rank(0);
  c.measured = StepPathMeasurement{0.000130, 0.000134, ""};
  BOOST_TEST(plan_chunks(c).step_path == "persistent");  // what the checkpoints record
  c.measured.reset();
  c.resumed_path = "persistent";
  BOOST_TEST(plan_chunks(c).chunked());
  BOOST_TEST(plan_chunks(c).describe == "up to 600 (persistent kernel, as the run it resumes took)");
  BOOST_TEST(plan_chunks(c).step_path == "persistent");
  c.resumed_path = "one-step";
  BOOST_TEST(!plan_chunks(c).chunked());
  BOOST_TEST(plan_chunks(c).describe == "1 (auto: one launch per step, as the run it resumes took)");
  BOOST_TEST(plan_chunks(c).step_path == "one-step");
  // An explicit N, and what rules chunks out, come before the recorded path.
  c.steps_per_launch = 7;
  BOOST_TEST(plan_chunks(c).describe == "up to 7 (persistent kernel)");
  c = one_rank(0, "the seq backend runs one step per kernel launch");
  c.resumed_path = "persistent";
  BOOST_TEST(plan_chunks(c).describe == "1 (auto: the seq backend runs one step per kernel launch)");
  BOOST_TEST(plan_chunks(c).step_path == "one-step");
  // The default loop's chunks give the one-step loop's bits: recorded as one-step.
  BOOST_TEST(plan_chunks(one_rank(7, "the seq backend runs one step per kernel launch")).step_path == "one-step");
}

BOOST_AUTO_TEST_CASE(an_explicit_n_chunks_on_any_backend) {
  BOOST_TEST(plan_chunks(one_rank(7)).describe == "up to 7 (persistent kernel)");
  const ChunkPlan loop = plan_chunks(one_rank(7, "the seq backend runs one step per kernel launch"));
  BOOST_TEST(loop.cap == 7);
  BOOST_TEST(loop.describe == "up to 7 (one kernel launch per step: the seq backend runs one step per kernel launch)");
  BOOST_TEST(plan_chunks(one_rank(5000)).describe == "up to 600 (persistent kernel)");
  const ChunkPlan one = plan_chunks(one_rank(1));
  BOOST_TEST(!one.chunked());
  BOOST_TEST(one.describe == "1 (--steps-per-launch 1)");
}

BOOST_AUTO_TEST_CASE(several_ranks_take_chunks_only_where_the_kernel_exchanges_inside_them) {
  ChunkConditions c = one_rank(7);
  c.ranks = 2;
  BOOST_TEST(plan_chunks(c).describe == "up to 7 (persistent kernel, the gradients summed over the ranks inside it)");
  c.exchange_unsupported = "a pair of GPUs has no peer access";
  BOOST_TEST(!plan_chunks(c).chunked());
  BOOST_TEST(plan_chunks(c).describe == "1 (2 ranks: a pair of GPUs has no peer access)");
  // A backend without the kernel: its default loop has no exchange, so an explicit N takes one step too.
  c = one_rank(7, "the seq backend runs one step per kernel launch");
  c.ranks = 2;
  c.exchange_unsupported = "the seq backend exchanges gradients between steps only";
  BOOST_TEST(!plan_chunks(c).chunked());
  BOOST_TEST(plan_chunks(c).describe == "1 (2 ranks: the seq backend runs one step per kernel launch)");
}

BOOST_AUTO_TEST_CASE(runs_that_need_the_host_between_steps_take_one_step_per_call) {
  ChunkConditions c = one_rank(0);
  c.on_nonfinite = NonFinitePolicy::kSkip;
  BOOST_TEST(plan_chunks(c).describe == "1 (--on-nonfinite skip)");
  c = one_rank(7);
  c.stream = true;
  BOOST_TEST(plan_chunks(c).describe == "1 (stream mode)");
  c.trace = true;
  c.ranks = 4;
  c.exchange_unsupported = "the ranks span more than one node";
  BOOST_TEST(plan_chunks(c).describe == "1 (4 ranks: the ranks span more than one node, stream mode, --trace)");
  BOOST_TEST(!plan_chunks(c).chunked());
}

BOOST_AUTO_TEST_CASE(a_chunk_ends_where_the_loop_must_act) {
  BOOST_TEST(chunk_end(epoch_of(0, 0)) == 20);   // up to the short last batch
  BOOST_TEST(chunk_end(epoch_of(20, 0)) == 21);  // which is a chunk of its own
  BOOST_TEST(chunk_end(epoch_of(3, 7)) == 10);   // the cap
  BOOST_TEST(chunk_end(epoch_of(17, 7)) == 20);
  ChunkBounds b = epoch_of(3, 0);                // 103 steps done: a checkpoint every 10 steps
  b.checkpoint_due = [](std::int64_t done) { return done % 10 == 0; };
  BOOST_TEST(chunk_end(b) == 10);                // after global step 110: steps 3..9 of the epoch
  b.steps_until_stop_hook = 2;
  BOOST_TEST(chunk_end(b) == 5);
  b = epoch_of(5, 0);
  b.steps_per_epoch = 20;  // no short batch
  b.train_count = 2000;
  BOOST_TEST(chunk_end(b) == 20);
  b.step = 19;
  b.checkpoint_due = [](std::int64_t) { return true; };
  BOOST_TEST(chunk_end(b) == 20);  // never empty
}

BOOST_AUTO_TEST_CASE(each_step_gets_its_own_lr_and_adam_step) {
  OptimizerSettings base;
  base.kind = OptimizerKind::kAdam;
  const LearningRate lr(0.1, LrSchedule{}, 4, 10, 100);  // warm-up: the lr changes every step
  const StepChunk chunk = make_step_chunk(base, lr, 7, 2, Range{350, 50}, 100, 3, -1);
  BOOST_TEST(chunk.steps() == 3);
  for (std::int64_t k = 0; k < 3; ++k) {
    BOOST_TEST(chunk.optimizer[static_cast<std::size_t>(k)].step == 3 + k);
    BOOST_TEST(chunk.optimizer[static_cast<std::size_t>(k)].lr == lr.at_float(2 + k));
  }
  BOOST_TEST(chunk.optimizer[0].lr != chunk.optimizer[1].lr);
  BOOST_TEST(chunk.grad_scale == 1.0f / 100.0f);
  BOOST_TEST(chunk.first == 350);  // this rank's slice of a global batch of 100
  BOOST_TEST(chunk.batch == 50);
  BOOST_TEST(chunk.stride == 100);
  BOOST_TEST(chunk.seed == 7U);
  BOOST_TEST(chunk.global_step == 2);
  BOOST_TEST(chunk.nan_at == -1);
}
