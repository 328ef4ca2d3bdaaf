#!/usr/bin/env bash
# Installs every Debian package cnn_mpi needs to build, test and run on a fresh Debian 12 machine.
# Idempotent: packages already present are skipped by apt-get. Needs root (or sudo).
# Usage: tools/install-deps.sh [--with-slurm]
set -euo pipefail

packages=(
  build-essential cmake pkg-config git ca-certificates
  openmpi-bin libopenmpi-dev              # MPI runtime and headers (mpirun, mpicxx)
  libhdf5-dev hdf5-tools                  # checkpoints and HDF5 input; h5dump for inspection
  libboost-test-dev                       # Boost.Test (compiled library)
  zlib1g-dev                              # .gz IDX files
  libcli11-dev                            # command-line parsing
  libtomlplusplus-dev                     # --config FILE.toml (toml++, used header-only; optional: CNN_ENABLE_CONFIG_FILE)
  dataset-fashion-mnist                   # the embedded default data set
  python3 python3-numpy python3-matplotlib python3-h5py   # comparison plots, checkpoint checks
  util-linux procps time                  # script(1) for the pseudo-terminal test, ps/pgrep, /usr/bin/time
  clang-14 libclang-rt-14-dev libomp-14-dev   # the ASan+UBSan test tree and the libFuzzer targets
)
if [[ "${1:-}" == "--with-slurm" ]]; then
  # iproute2 (ip netns, veth, bridge): the two-node cluster in network namespaces (tools/slurm/start-two-node-cluster.sh)
  packages+=(slurmctld slurmd slurm-client munge libpmix-dev iproute2)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
