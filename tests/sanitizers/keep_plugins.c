/* LD_PRELOADed in the sanitizer run only (tools/test.sh). Open MPI dlopen()s its plugins
 * (mca_*.so) and dlclose()s them in MPI_Finalize, before LeakSanitizer looks at the heap at exit;
 * the leaks those plugins leave then have "<unknown module>" stacks that no suppression can name.
 * A no-op dlclose keeps them mapped, so tests/sanitizers/lsan.supp can name each library. */
int dlclose(void *handle) {
  (void)handle;
  return 0;
}
