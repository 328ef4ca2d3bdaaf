// The positive control for getenv_watch.c: a thread that reads the environment while MPI_Init runs on
// the main thread, the pattern the watch must report. startup_environment_test.sh fails if it does not.
// It reads once a millisecond, not in a tight loop: a tight loop crashes here within seconds, which is
// the bug itself, and the control should report it, not die of it.
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

static atomic_int done;

static void* read_environment(void* unused) {
  (void)unused;
  while (!atomic_load(&done)) {
    (void)getenv("HOME");
    usleep(1000);
  }
  return NULL;
}

int main(int argc, char** argv) {
  pthread_t reader;
  pthread_create(&reader, NULL, read_environment, NULL);
  MPI_Init(&argc, &argv);
  atomic_store(&done, 1);
  pthread_join(reader, NULL);
  MPI_Finalize();
  return 0;
}
