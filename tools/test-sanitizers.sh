#!/usr/bin/env bash
# The CPU test suite again, in a second tree built with clang under AddressSanitizer and
# UndefinedBehaviorSanitizer (any UB is fatal), the MPI tests included; then every libFuzzer target
# (tests/fuzz) for CNN_FUZZ_SECONDS each (default 30). Called by tools/test.sh; runs on its own too.
#
# Left out, and why:
#   learning_test  full-data accuracy runs (minutes in Release, ~4x that under ASan); the same code
#                  paths run in every other script test on smaller data.
#   slurm_test     starts munge/slurmctld/slurmd and waits on a scheduler; cnn_mpi's side of it
#                  (signals, requeue, resume) runs under ASan in signal_test and resume_test.
#   compare_test   a timing sweep of tools/compare; its cnn_mpi runs are ordinary training runs.
#   gpu            no GPU on the CI machine (compute-sanitizer covers the GPU: tools/gpu-validate.sh).
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
ctest --output-on-failure --timeout 1200 -LE gpu -E '^(learning_test|slurm_test|compare_test)$' "$@"
