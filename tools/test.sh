#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing (SLURM too, for the
# real-cluster test), builds in Release mode, and runs every test through CTest; then the SIMD kernels'
# suites built for AVX2 (tools/test-avx2.sh), and the CPU suite again in an ASan+UBSan tree with the
# fuzz targets (tools/test-sanitizers.sh). GPU tests report
# "skipped" on a machine without a usable GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh --with-slurm
tools/build.sh
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
