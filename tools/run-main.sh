#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: installs what is missing, builds in Release mode, and
# trains the seed CNN with 2 MPI ranks on Fashion-MNIST (Debian's dataset-fashion-mnist), printing
# per-epoch loss, test accuracy and images/s. Extra arguments go to cnn_mpi (e.g. --epochs 5).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build.sh
source tools/mpi-env.sh
ranks=2
oversubscribe=()
if (($(nproc) < ranks)); then oversubscribe=(--oversubscribe); fi
exec mpirun -np "$ranks" "${oversubscribe[@]}" build/cnn_mpi --dataset fashion --filters 32 --batch 100 --epochs 3 \
  --out "runs/main-$(date -u +%Y%m%d-%H%M%S)" "$@"
