#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing (SLURM too, for the
# real-cluster test), builds in Release mode, and runs every test through CTest; then the SIMD kernels'
# suites built for AVX2 (tools/test-avx2.sh), and the CPU suite again in an ASan+UBSan tree with the
# fuzz targets (tools/test-sanitizers.sh). GPU tests report
# "skipped" on a machine without a usable GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh --with-slurm
# Without a usable GPU the CUDA code only has to compile, and the GPU tests skip: sm_75 and sm_90a
# compile every preprocessor branch of kernels/ once (below Ampere; mma.sync and cp.async from sm_80
# on, and the #else of the warpgroup code; wgmma and TMA), where the six targets of the default list
# (CMakeLists.txt) took most of the CI's 13 minutes of set-up and build on 2 cores. A GPU, or
# CMAKE_CUDA_ARCHITECTURES already in the build's cache, keeps its targets.
cuda_targets=()
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU ' &&
   ! grep -qs '^CMAKE_CUDA_ARCHITECTURES:' "${CNN_BUILD_DIR:-build}/CMakeCache.txt"; then
  cuda_targets=(-DCMAKE_CUDA_ARCHITECTURES="75-real;90a-real")
fi
tools/build.sh "${cuda_targets[@]}"
source tools/mpi-env.sh
(cd "${CNN_BUILD_DIR:-build}" && ctest --output-on-failure --timeout 1200 "$@")
# The CPU kernels' AVX2 path, in a small tree of its own (the Release tree may have AVX-512).
tools/test-avx2.sh
# The CPU suite again under ASan+UBSan, and each fuzz target for 30 s (docs/RELIABILITY.md).
# CNN_SKIP_SANITIZERS=1 leaves that out (a quick local run).
if [[ -z ${CNN_SKIP_SANITIZERS:-} ]]; then
  start=$SECONDS
  tools/test-sanitizers.sh
  echo "test.sh: sanitizer tree and fuzzing took $((SECONDS - start)) s"
fi
