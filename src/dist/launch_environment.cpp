#include "cnn/launch_environment.hpp"

#include <mpi.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "cnn/errors.hpp"

namespace cnn {
namespace {

// A process count as launchers write it: a positive decimal integer, nothing else. 0 otherwise.
int process_count(const char* text) {
  if (text == nullptr) return 0;
  int value = 0;
  const char* end = text + std::strlen(text);
  const auto [stop, error] = std::from_chars(text, end, value);
  if (error != std::errc() || stop != end || value < 1) return 0;
  return value;
}

std::string assignment(const char* name, const char* value) { return std::string(name) + "=" + value; }

// "Open MPI v4.1.4" from "Open MPI v4.1.4, package: ..., ident: ...": enough to tell which MPI.
std::string this_mpi() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(version, &length) != MPI_SUCCESS) return "this build's MPI";
  std::string text(version, static_cast<std::size_t>(length));
  text = text.substr(0, text.find_first_of(",\n"));
  while (!text.empty() && (text.back() == ' ' || text.back() == '\0')) text.pop_back();
  return text.empty() ? "this build's MPI" : text;
}

}  // namespace

LaunchEnvironment read_launch_environment(const EnvironmentLookup& lookup) {
  LaunchEnvironment launch;
  if (const int ranks = process_count(lookup("OMPI_COMM_WORLD_SIZE")); ranks > 0) {
    launch.launcher = Launcher::kMpirun;
    launch.intended_ranks = ranks;
    launch.evidence = assignment("OMPI_COMM_WORLD_SIZE", lookup("OMPI_COMM_WORLD_SIZE"));
    return launch;
  }
  if (const char* step = lookup("SLURM_STEP_ID"); step != nullptr) {
    // The step's own count first: `srun --preserve-env` and salloc's interactive step keep the
    // job's SLURM_NTASKS in a step that has fewer tasks.
    for (const char* name : {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"}) {
      if (const int ranks = process_count(lookup(name)); ranks > 0) {
        launch.launcher = Launcher::kSrunStep;
        launch.intended_ranks = ranks;
        launch.evidence = assignment("SLURM_STEP_ID", step) + ", " + assignment(name, lookup(name));
        return launch;
      }
    }
  }
  if (const int ranks = process_count(lookup("PMI_SIZE")); ranks > 0) {
    launch.launcher = Launcher::kPmi;
    launch.intended_ranks = ranks;
    launch.evidence = assignment("PMI_SIZE", lookup("PMI_SIZE"));
  }
  return launch;
}

LaunchEnvironment read_launch_environment() {
  return read_launch_environment([](const char* name) { return static_cast<const char*>(std::getenv(name)); });
}

void refuse_lone_rank(const LaunchEnvironment& launch, int world_size) {
  if (world_size != 1 || launch.intended_ranks <= 1) return;
  const std::string started = std::to_string(launch.intended_ranks);
  const std::string alone = "), but MPI made this process a world of 1 rank: ";
  const std::string consequence = ", and each would train alone into the same run directory. ";
  switch (launch.launcher) {
    case Launcher::kSrunStep:
      throw UsageError("srun started " + started + " tasks in this step (" + launch.evidence + alone +
                       "srun did not wire them up as one MPI job (no --mpi=pmix, or no PMIx plugin on this "
                       "cluster)" + consequence +
                       "Launch with `srun --mpi=pmix cnn_mpi ...` (`srun --mpi=list` lists the plugins), or "
                       "`mpirun cnn_mpi ...` inside the allocation");
    case Launcher::kMpirun:
      throw UsageError("mpirun started " + started + " ranks (" + launch.evidence + alone +
                       "cnn_mpi was built with another MPI (" + this_mpi() + ") than this mpirun's" +
                       consequence + "Launch it with its own MPI's mpirun, or rebuild it with this one");
    case Launcher::kPmi:
      throw UsageError("a PMI launcher started " + started + " processes (" + launch.evidence + alone +
                       "this build's MPI (" + this_mpi() +
                       ") does not speak that launcher's PMI (MPICH's or Intel MPI's mpiexec?)" + consequence +
                       "Launch with the mpirun of " + this_mpi() + ", or under SLURM `srun --mpi=pmix cnn_mpi ...`");
    case Launcher::kNone:
      return;
  }
}

}  // namespace cnn
