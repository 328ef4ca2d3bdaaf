#!/usr/bin/env bash
# The CPU kernels' AVX2 path (ops/simd.hpp: 8 lanes), where the Release tree, built for this machine
# (-march=native), may have taken the AVX-512 one (16 lanes): a small third tree built for
# -march=x86-64-v3 runs the suites that check the SIMD kernels against float64 and finite-difference
# references and `threads` against `seq` (test_layers, test_layer_simd, test_ops, test_gradients,
# test_cpu_backend, test_backend_agreement). Called by tools/test.sh; runs on its own too.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${CNN_AVX2_BUILD_DIR:-build-avx2}
suites=(test_layers test_layer_simd test_ops test_gradients test_cpu_backend test_backend_agreement)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCNN_ENABLE_CUDA=OFF -DCNN_NATIVE=OFF \
  -DCMAKE_CXX_FLAGS=-march=x86-64-v3 >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${suites[@]}"
source tools/mpi-env.sh
regex=$(IFS='|'; echo "^(${suites[*]})\$")
(cd "$build" && ctest --output-on-failure --timeout 600 -j "$(nproc)" -R "$regex")
