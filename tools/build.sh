#!/usr/bin/env bash
# Configures and builds cnn_mpi in Release mode into build/ (or $CNN_BUILD_DIR).
# Extra arguments go to CMake, e.g. tools/build.sh -DCNN_ENABLE_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${CNN_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build_dir" -j "$(nproc)"
