// The launcher's intent against MPI's world (include/cnn/launch_environment.hpp): the environments
// below are the ones measured on Slurm 22.05 with Open MPI 4.1 (a batch shell, an srun step of 2
// tasks, an mpirun rank inside the job), plus the variables of older SLURM and of PMI launchers.
#define BOOST_TEST_MODULE launch_environment
#include <map>
#include <string>

#include "boost_test.hpp"
#include "cnn/errors.hpp"
#include "cnn/launch_environment.hpp"

namespace {

using Environment = std::map<std::string, std::string>;

cnn::LaunchEnvironment read(const Environment& environment) {
  return cnn::read_launch_environment([&](const char* name) -> const char* {
    const auto found = environment.find(name);
    return found == environment.end() ? nullptr : found->second.c_str();
  });
}

// The message of refuse_lone_rank, or "" when it lets the start through.
std::string refusal(const Environment& environment, int world_size) {
  try {
    cnn::refuse_lone_rank(read(environment), world_size);
  } catch (const cnn::UsageError& e) {
    BOOST_TEST((e.code() == cnn::ExitCode::kUsage));
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A batch script's shell and an salloc shell of a 2-task job: no SLURM_STEP_ID.
const Environment kBatchShell = {{"SLURM_JOB_ID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_NPROCS", "2"},
                                 {"SLURM_PROCID", "0"}, {"SLURM_TASKS_PER_NODE", "2"}};

Environment with(Environment environment, const Environment& more) {
  for (const auto& [name, value] : more) environment[name] = value;
  return environment;
}

// A task of `srun -n 2` in that job.
const Environment kSrunStep = with(kBatchShell, {{"SLURM_STEP_ID", "0"}, {"SLURM_STEPID", "0"},
                                                 {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "1"}});

}  // namespace

BOOST_AUTO_TEST_CASE(no_launcher_means_single_rank_mode) {
  const cnn::LaunchEnvironment launch = read({});
  BOOST_TEST((launch.launcher == cnn::Launcher::kNone));
  BOOST_TEST(launch.intended_ranks == 0);
  BOOST_TEST(refusal({}, 1).empty());
}

BOOST_AUTO_TEST_CASE(batch_and_salloc_shells_stay_single_rank_mode) {
  // SLURM_NTASKS=2 without a step is the allocation's size, not a launch: plain cnn_mpi there runs alone.
  BOOST_TEST((read(kBatchShell).launcher == cnn::Launcher::kNone));
  BOOST_TEST(refusal(kBatchShell, 1).empty());
}

BOOST_AUTO_TEST_CASE(srun_step_of_several_tasks_with_a_world_of_one_is_refused) {
  const cnn::LaunchEnvironment launch = read(kSrunStep);
  BOOST_TEST((launch.launcher == cnn::Launcher::kSrunStep));
  BOOST_TEST(launch.intended_ranks == 2);
  BOOST_TEST(launch.evidence == "SLURM_STEP_ID=0, SLURM_STEP_NUM_TASKS=2");
  const std::string message = refusal(kSrunStep, 1);
  BOOST_TEST(contains(message, "srun started 2 tasks in this step (SLURM_STEP_ID=0, SLURM_STEP_NUM_TASKS=2)"));
  BOOST_TEST(contains(message, "a world of 1 rank"));
  BOOST_TEST(contains(message, "srun --mpi=pmix"));
  BOOST_TEST(contains(message, "mpirun"));
  BOOST_TEST(message.find('\n') == std::string::npos);  // one line
}

BOOST_AUTO_TEST_CASE(srun_step_wired_up_by_pmix_is_allowed) {
  BOOST_TEST(refusal(kSrunStep, 2).empty());
  // A world larger than one is never second-guessed here (the ranks' agreement checks the rest).
  BOOST_TEST(refusal(with(kSrunStep, {{"SLURM_STEP_NUM_TASKS", "8"}}), 4).empty());
}

BOOST_AUTO_TEST_CASE(srun_step_of_one_task_is_single_rank_mode) {
  // `srun -n 1 cnn_mpi`, `srun --pty bash` then cnn_mpi: one task, one rank, as intended.
  BOOST_TEST(refusal(with(kSrunStep, {{"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_NTASKS", "1"}}), 1).empty());
}

BOOST_AUTO_TEST_CASE(the_step_count_wins_over_the_jobs) {
  // salloc's interactive step and `srun --preserve-env` keep the job's SLURM_NTASKS in a 1-task step.
  const Environment interactive = with(kBatchShell, {{"SLURM_STEP_ID", "4294967290"}, {"SLURM_NTASKS", "4"},
                                                     {"SLURM_STEP_NUM_TASKS", "1"}});
  BOOST_TEST(read(interactive).intended_ranks == 1);
  BOOST_TEST(refusal(interactive, 1).empty());
}

BOOST_AUTO_TEST_CASE(older_slurm_counts_come_from_ntasks_then_nprocs) {
  Environment old = {{"SLURM_JOB_ID", "9"}, {"SLURM_STEP_ID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_NPROCS", "6"}};
  BOOST_TEST(read(old).intended_ranks == 4);
  BOOST_TEST(read(old).evidence == "SLURM_STEP_ID=3, SLURM_NTASKS=4");
  old.erase("SLURM_NTASKS");
  BOOST_TEST(read(old).intended_ranks == 6);
  BOOST_TEST(contains(refusal(old, 1), "srun started 6 tasks"));
}

BOOST_AUTO_TEST_CASE(malformed_counts_count_as_unset) {
  for (const char* bad : {"", "0", "-2", "2x", " 2", "two", "99999999999999999999"}) {
    BOOST_TEST_CONTEXT("SLURM_STEP_NUM_TASKS='" << bad << "'") {
      const Environment step = {{"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", bad}, {"SLURM_NTASKS", "3"}};
      BOOST_TEST(read(step).intended_ranks == 3);  // falls through to the next variable
    }
  }
  BOOST_TEST((read({{"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "x"}}).launcher == cnn::Launcher::kNone));
}

BOOST_AUTO_TEST_CASE(mpirun_chose_the_world_even_inside_an_srun_step) {
  // mpirun's ranks on remote nodes run under its daemons, themselves an srun step of one task per
  // node; `mpirun -np 1` from an `srun -n 4 --pty bash` shell inherits that step's variables too.
  const Environment one_rank = with(kSrunStep, {{"OMPI_COMM_WORLD_SIZE", "1"}, {"SLURM_STEP_NUM_TASKS", "4"}});
  BOOST_TEST((read(one_rank).launcher == cnn::Launcher::kMpirun));
  BOOST_TEST(refusal(one_rank, 1).empty());
  const Environment four = with(one_rank, {{"OMPI_COMM_WORLD_SIZE", "4"}});
  BOOST_TEST(refusal(four, 4).empty());
  // Four ranks meant, one world each: a binary built with another MPI than this mpirun.
  const std::string message = refusal(four, 1);
  BOOST_TEST(contains(message, "mpirun started 4 ranks (OMPI_COMM_WORLD_SIZE=4)"));
  BOOST_TEST(contains(message, "built with another MPI"));
}

BOOST_AUTO_TEST_CASE(pmi_launcher_of_another_mpi_is_refused) {
  const Environment hydra = {{"PMI_SIZE", "3"}, {"PMI_RANK", "2"}};
  BOOST_TEST((read(hydra).launcher == cnn::Launcher::kPmi));
  const std::string message = refusal(hydra, 1);
  BOOST_TEST(contains(message, "a PMI launcher started 3 processes (PMI_SIZE=3)"));
  BOOST_TEST(contains(message, "srun --mpi=pmix"));
  BOOST_TEST(refusal(hydra, 3).empty());
  BOOST_TEST(refusal({{"PMI_SIZE", "1"}}, 1).empty());
}
