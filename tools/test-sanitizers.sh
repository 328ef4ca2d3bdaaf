#!/usr/bin/env bash
# The CPU test suite again, in a second tree built with clang under AddressSanitizer and
# UndefinedBehaviorSanitizer (any UB is fatal), the MPI tests included; then every libFuzzer target
# (tests/fuzz) for CNN_FUZZ_SECONDS each (default 30). Called by tools/test.sh; runs on its own too.
#
# Left out, and why:
#   learning_test  full-data accuracy runs (minutes in Release, ~4x that under ASan); the same code
#                  paths run in every other script test on smaller data.
#   safe_write_test  times its SIGKILLs for Release-speed runs; under ASan's slower start-up most
#                  kills land outside a write and its own check (enough kills inside writes) fails. The
#                  write path itself runs under ASan in every checkpointing test (resume_test, fault_test).
#   cifar_preset_learning_test   3 full Fashion-MNIST epochs of the cifar preset (100 s in Release);
#                  its layer ops run under ASan in test_layers (finite differences, seq vs threads,
#                  layer vs fused) and in resume_test (a general network with Adam, resumed).
#   slurm_test, slurm_two_node_test   start munge/slurmctld/slurmd (the second in two network
#                  namespaces) and wait on a scheduler; cnn_mpi's side of them (signals, requeue, resume,
#                  the peer probe) runs under ASan in signal_test, resume_test, fault_test and mpi_peer_probe.
#   compare_test   a timing sweep of tools/compare; its cnn_mpi runs are ordinary training runs.
#   signal_test    5 min under ASan (30-epoch 2-rank reference runs); the stop-signal path (handler,
#                  agreement, checkpoint, exit 5) runs under ASan in resume_test (SIGUSR1 raised by
#                  the test hook), test_signals, and the SIGKILL paths in fault_test/safe_write_test.
#   timing_log_test, progress_test   check the formats of timing.csv/allreduce.csv and of the live
#                  progress line (76 s and 46 s under ASan); the code that fills them runs in every
#                  other script test.
#   ownership_test   a second run against a running one, a killed lock holder, SIGUSR1 during start-up,
#                  MPMD ranks (30 s under ASan); the code it drives runs under ASan in every other script
#                  test (each run claims its directory) and in bad_input_test's run_directory and launch
#                  classes (a held lock, the start-up agreement).
#   config_file_test   five short training runs that write and read RUN_DIR/config.toml; the reader runs
#                  under ASan in test_config_file and in bad_input_test's class config_file (26 files), the
#                  writer in test_settings_toml and in every other script test's runs.
#   flight_recorder_test   two 4-rank runs that a stopped rank hangs (about 22 s in Release, mostly the
#                  watchdog's timeout and grace); the flight recorder runs under ASan in test_flight_recorder
#                  (the ring, its file, the verdict, the watchdog's writer thread) and end to end in
#                  fault_test's two SIGSTOP cases, whose line names the stopped rank from the records.
#   gpu            no GPU on the CI machine (compute-sanitizer covers the GPU: tools/gpu-validate.sh).
# Measured on the 2-core VM (docs/RELIABILITY.md): the full list took 1,084 s; this selection ~10 min.
# Usage: tools/test-sanitizers.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${CNN_SANITIZE_BUILD_DIR:-build-asan}
CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCNN_ENABLE_CUDA=OFF \
  -DCNN_SANITIZE=address,undefined -DCNN_FUZZ=ON -DCNN_FUZZ_SECONDS="${CNN_FUZZ_SECONDS:-30}" >/dev/null
cmake --build "$build" -j "$(nproc)"
# Keeps Open MPI's plugins mapped until exit, so that the suppressions can name them (keep_plugins.c).
cc -shared -fPIC -O2 -o "$build/keep_plugins.so" tests/sanitizers/keep_plugins.c

source tools/mpi-env.sh
supp=$PWD/tests/sanitizers/lsan.supp
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=1
# print_suppressions=0: the tests count stderr lines; suppressed library leaks must not add any.
export LSAN_OPTIONS=suppressions=$supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LD_PRELOAD=$PWD/$build/keep_plugins.so
cd "$build"
# -j2: the fuzz targets (one core each) run two at a time; script tests are RUN_SERIAL anyway.
ctest --output-on-failure --timeout 1200 -j2 -LE gpu \
  -E '^(learning_test|cifar_preset_learning_test|safe_write_test|slurm_test|slurm_two_node_test|compare_test|signal_test|timing_log_test|progress_test|ownership_test|config_file_test|flight_recorder_test)$' "$@"
