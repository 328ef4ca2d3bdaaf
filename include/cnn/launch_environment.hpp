// What the launcher meant the MPI world to be, against what MPI made of it.
//
// A launcher that starts N processes without the wire-up this build's MPI understands (`srun`
// without `--mpi=pmix`, a site whose PMI plugin is missing, another MPI's mpiexec) leaves each
// process to MPI_Init alone: N worlds of one rank. Each would then train the whole data set by
// itself and write the same run directory, so such a start is refused before anything is written.
//
// The launcher's intent is read from the environment it gave the process, before MPI_Init (which
// may add variables of its own), in this order:
//   1. OMPI_COMM_WORLD_SIZE: Open MPI's mpirun started the process and chose the world. It wins over
//      SLURM's variables, which an mpirun rank inherits from its surroundings (the srun step of
//      mpirun's remote daemons, or an interactive `srun --pty` shell).
//   2. SLURM_STEP_ID set: the process is a task of an srun step, and the step has
//      SLURM_STEP_NUM_TASKS tasks (else SLURM_NTASKS, else SLURM_NPROCS: older SLURM). A batch
//      script's shell and an `salloc` shell have SLURM_JOB_ID and SLURM_NTASKS but no SLURM_STEP_ID
//      (checked on Slurm 22.05): plain `cnn_mpi` there is the single-rank mode and stays allowed.
//   3. PMI_SIZE: a PMI-1/PMI-2 launcher (MPICH's or Intel MPI's mpiexec) started the process.
#pragma once

#include <functional>
#include <string>

namespace cnn {

enum class Launcher {
  kNone,      // no launcher said how many processes it started (run by hand, a batch shell, salloc)
  kMpirun,    // Open MPI's mpirun (OMPI_COMM_WORLD_SIZE)
  kSrunStep,  // a task of an srun step (SLURM_STEP_ID)
  kPmi,       // a PMI-1/PMI-2 launcher (PMI_SIZE)
};

struct LaunchEnvironment {
  Launcher launcher = Launcher::kNone;
  int intended_ranks = 0;  // the processes the launcher started; 0 with kNone
  std::string evidence;    // the variables that said so, e.g. "SLURM_STEP_ID=0, SLURM_STEP_NUM_TASKS=4"
};

// Returns the value of an environment variable, or nullptr when it is unset (std::getenv's contract).
using EnvironmentLookup = std::function<const char*(const char*)>;

// Reads the launcher's variables through `lookup`. A count that is not a positive decimal integer
// counts as unset: the next source in the order above is asked instead.
LaunchEnvironment read_launch_environment(const EnvironmentLookup& lookup);
// The same, from this process's environment. Call it before MPI_Init.
LaunchEnvironment read_launch_environment();

// Throws UsageError (exit 2) when the launcher started more than one process but MPI gave this one a
// world of one rank. The message names the variables, the cause and the launch line that fixes it.
// Local: every such process is a world of its own, so each prints its line and stops.
void refuse_lone_rank(const LaunchEnvironment& launch, int world_size);

}  // namespace cnn
