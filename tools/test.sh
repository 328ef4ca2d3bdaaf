#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing (SLURM too, for the
# real-cluster test), builds in Release mode, and runs every test through CTest. GPU tests report
# "skipped" on a machine without a usable GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh --with-slurm
tools/build.sh
source tools/mpi-env.sh
cd "${CNN_BUILD_DIR:-build}"
ctest --output-on-failure --timeout 1200 "$@"
