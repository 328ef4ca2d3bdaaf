# Sourced by the tools: lets mpirun run as root (containers, CI), which Open MPI refuses by default.
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
