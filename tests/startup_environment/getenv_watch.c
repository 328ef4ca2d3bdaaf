// An LD_PRELOAD library for startup_environment_test.sh: it reports every getenv that a thread of the
// program (not one of the MPI library's own) makes while MPI_Init or MPI_Finalize runs on another
// thread. glibc's getenv walks the environment array without a lock; MPI_Init's setenv calls
// (OMPI_*, PMIX_*, ...) reallocate that array, so such a read can follow a freed pointer and crash
// (it did once in CI: bad_input_test, docs/RELIABILITY.md). Reports go to stderr as
//   getenv_watch: getenv(NAME) on another thread, called from OBJECT, while MPI_Init runs
// Calls that libc makes to itself do not pass through here; the watch sees every other library.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static atomic_long mpi_thread;                 // the thread inside MPI_Init/MPI_Finalize, 0 outside
static const char* _Atomic mpi_call = "";

static long thread_id(void) { return (long)syscall(SYS_gettid); }

// The MPI library's own threads (progress, PMIx, event loops) read its variables under its own rules.
static int is_mpi_library(const char* object) {
  static const char* const names[] = {"libmpi", "libopen-", "libpmix", "mca_", "libevent", "libhwloc",
                                      "libucp", "libucs", "libuct", "libfabric", "libpsm", "libibverbs"};
  const char* base = strrchr(object, '/');
  base = base ? base + 1 : object;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
    if (strncmp(base, names[i], strlen(names[i])) == 0) return 1;
  return 0;
}

char* getenv(const char* name) {
  static char* (*real_getenv)(const char*);
  if (!real_getenv) real_getenv = (char* (*)(const char*))dlsym(RTLD_NEXT, "getenv");
  const long in_mpi = atomic_load(&mpi_thread);
  if (in_mpi != 0 && in_mpi != thread_id()) {
    Dl_info info;
    const char* object = dladdr(__builtin_return_address(0), &info) && info.dli_fname ? info.dli_fname : "?";
    if (!is_mpi_library(object)) {
      char line[512];
      const int n = snprintf(line, sizeof line, "getenv_watch: getenv(%s) on another thread, called from %s, while %s runs\n",
                             name ? name : "(null)", object, atomic_load(&mpi_call));
      if (n > 0) (void)!write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    }
  }
  return real_getenv(name);
}

static void enter(const char* call) {
  atomic_store(&mpi_call, call);
  atomic_store(&mpi_thread, thread_id());
}
static void leave(void) { atomic_store(&mpi_thread, 0); }

int MPI_Init(int* argc, char*** argv) {
  int (*real)(int*, char***) = (int (*)(int*, char***))dlsym(RTLD_NEXT, "MPI_Init");
  enter("MPI_Init");
  const int result = real(argc, argv);
  leave();
  return result;
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  int (*real)(int*, char***, int, int*) = (int (*)(int*, char***, int, int*))dlsym(RTLD_NEXT, "MPI_Init_thread");
  enter("MPI_Init_thread");
  const int result = real(argc, argv, required, provided);
  leave();
  return result;
}

int MPI_Finalize(void) {
  int (*real)(void) = (int (*)(void))dlsym(RTLD_NEXT, "MPI_Finalize");
  enter("MPI_Finalize");
  const int result = real();
  leave();
  return result;
}
