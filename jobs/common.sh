# shellcheck shell=bash
# jobs/common.sh: sourced (not run) by the batch scripts in jobs/. It turns environment variables
# into the cnn_mpi argument list and the launch line, so that every script reads the same knobs
# the same way. Nothing here starts anything; the scripts call cnn_launch_line and run it.
#
# The knobs (all optional; unset means "cnn_mpi's own default"):
#   CNN_BIN            the cnn_mpi executable      (default: installed scripts take their own
#                                                   installation's PREFIX/bin/cnn_mpi; scripts of a
#                                                   checkout take $SLURM_SUBMIT_DIR/build/cnn_mpi,
#                                                   else the checkout's build/cnn_mpi, else cnn_mpi
#                                                   on PATH)
#   CNN_DATA           data directory              (default: /usr/share/datasets/fashion-mnist)
#   CNN_DATASET        fashion | mnist              (default: fashion)
#   CNN_OUT            run directory               (default: $SLURM_SUBMIT_DIR/runs/<job name>-<job id>;
#                                                   a requeued job keeps its id, so it keeps its directory)
#   CNN_EPOCHS CNN_FILTERS CNN_BATCH CNN_LR CNN_SEED CNN_MODEL CNN_OPTIMIZER
#   CNN_TRAIN_SAMPLES CNN_TEST_SAMPLES
#   CNN_DEVICE         cpu | gpu | auto            (each script sets its own default)
#   CNN_BACKEND        seq | threads | cuda
#   CNN_CHECKPOINT_EVERY (epochs)  CNN_CHECKPOINT_EVERY_STEPS  CNN_KEEP  CNN_RESUME (auto | PATH)
#   CNN_EXTRA_ARGS     more cnn_mpi options, split on spaces (e.g. "--quiet --momentum 0.8")
#   Arguments given to the script itself (sbatch jobs/train-cpu.sbatch --epochs 3) come last, and
#   win over the CNN_* variables (cnn_mpi takes the last of a repeated option).
#
#   LAUNCHER           srun (default) | mpirun
#   SRUN_MPI           srun's --mpi plugin (default pmix: Debian's Open MPI 4.1 has no PMI-2 client)
#   SRUN_EXTRA_ARGS    more srun options, split on spaces
#   MPIRUN_EXTRA_ARGS  more mpirun options, split on spaces (e.g. "--hostfile hosts" outside SLURM)
#   DRY_RUN=1          print the resolved launch line and exit without running it

# Prefixes every line the job script writes, so that the script's own lines stand out among the
# trainer's in slurm-<id>.out; the job id and the time say which start of a requeued job wrote it.
cnn_log() {
  echo "[job ${SLURM_JOB_ID:-none} $(date +%H:%M:%S)] $*"
}

# The cnn_mpi executable, in this order:
#  1. CNN_BIN.
#  2. Scripts installed by `cmake --install` (jobs-layout.sh beside this file): the same installation's
#     binary, PREFIX/bin/cnn_mpi, whatever the submit directory holds. It is named even if it is
#     missing, so that a broken installation fails with its path rather than running another build.
#  3. Scripts of a checkout: the submit directory's build/ (submitting from the repository root),
#     then the build/ of the checkout these scripts belong to, then cnn_mpi on PATH.
cnn_binary() {
  local jobs_dir
  jobs_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  if [[ -n ${CNN_BIN:-} ]]; then
    echo "$CNN_BIN"
  elif [[ -f $jobs_dir/jobs-layout.sh ]]; then
    local CNN_INSTALLED_BINDIR=""
    # shellcheck source=/dev/null
    source "$jobs_dir/jobs-layout.sh"
    [[ $CNN_INSTALLED_BINDIR == /* ]] || CNN_INSTALLED_BINDIR=$jobs_dir/$CNN_INSTALLED_BINDIR
    # The directory as a plain path (PREFIX/bin, not PREFIX/share/cnn_mpi/jobs/../../../bin) where it exists.
    if [[ -d $CNN_INSTALLED_BINDIR ]]; then CNN_INSTALLED_BINDIR=$(cd "$CNN_INSTALLED_BINDIR" && pwd); fi
    echo "$CNN_INSTALLED_BINDIR/cnn_mpi"
  elif [[ -x ${SLURM_SUBMIT_DIR:-$PWD}/build/cnn_mpi ]]; then
    echo "${SLURM_SUBMIT_DIR:-$PWD}/build/cnn_mpi"
  elif [[ -x $jobs_dir/../build/cnn_mpi ]]; then
    echo "$(cd "$jobs_dir/.." && pwd)/build/cnn_mpi"
  else
    command -v cnn_mpi || echo cnn_mpi
  fi
}

# Fills the global array CNN_ARGS: the executable, then its options, then "$@" (the script's own
# arguments). Only set knobs become options, so cnn_mpi's defaults stay cnn_mpi's business.
cnn_build_args() {
  local job_name=${SLURM_JOB_NAME:-cnn}
  job_name=${job_name%.sbatch}
  : "${CNN_OUT:=${SLURM_SUBMIT_DIR:-$PWD}/runs/${job_name}-${SLURM_JOB_ID:-local}}"
  CNN_ARGS=("$(cnn_binary)" train
    --data "${CNN_DATA:-/usr/share/datasets/fashion-mnist}"
    --dataset "${CNN_DATASET:-fashion}"
    --out "$CNN_OUT")
  local pair option variable
  for pair in epochs:CNN_EPOCHS filters:CNN_FILTERS batch:CNN_BATCH lr:CNN_LR seed:CNN_SEED \
    model:CNN_MODEL optimizer:CNN_OPTIMIZER train-samples:CNN_TRAIN_SAMPLES \
    test-samples:CNN_TEST_SAMPLES device:CNN_DEVICE backend:CNN_BACKEND \
    checkpoint-every:CNN_CHECKPOINT_EVERY checkpoint-every-steps:CNN_CHECKPOINT_EVERY_STEPS \
    keep:CNN_KEEP resume:CNN_RESUME; do
    option=${pair%%:*}
    variable=${pair#*:}
    if [[ -n ${!variable:-} ]]; then CNN_ARGS+=("--$option" "${!variable}"); fi
  done
  local extra=()
  # Word splitting is the point: CNN_EXTRA_ARGS holds several options in one variable.
  read -r -a extra <<<"${CNN_EXTRA_ARGS:-}"
  CNN_ARGS+=("${extra[@]}" "$@")
}

# Fills the global array LAUNCH with the launcher and its options, for KIND cpu or gpu:
#   srun   inherits the allocation's geometry (-N, -n, --ntasks-per-node, -c, --gpus...) from the
#          batch step, so it needs none of it repeated; --mpi picks the PMIx wire-up.
#   mpirun reads the allocation through Open MPI's SLURM support (ras/slurm) and starts remote
#          ranks with srun under the hood; -np, the mapping and the binding are spelt out so that the
#          same line also works on a machine without SLURM (DRY_RUN=1 prints it).
# per_node (GPU ranks per node) is used by mpirun's GPU mapping only; cpus by its CPU mapping only.
# Environment for the ranks: srun exports the batch environment (--export=ALL); mpirun is given
# -x NAME=VALUE for the variables that matter (OpenMP's, NCCL's), so that the printed line is
# complete on its own.
cnn_launch_line() {
  local kind=$1 ntasks=$2 per_node=$3 cpus=$4
  local extra=()
  case ${LAUNCHER:-srun} in
    srun)
      LAUNCH=(srun "--mpi=${SRUN_MPI:-pmix}")
      # Outside an allocation (DRY_RUN=1 on a login node) srun needs the geometry spelt out.
      if [[ -z ${SLURM_JOB_ID:-} ]]; then
        if [[ $kind == gpu ]]; then
          LAUNCH+=(-n "$ntasks" "--ntasks-per-node=$per_node" "--gpus-per-node=$per_node")
        else
          LAUNCH+=(-n "$ntasks" -c "$cpus")
        fi
      fi
      # Bind each task to its -c cores. Where the cluster's TaskPlugin cannot bind, SLURM ignores it.
      if [[ $kind == cpu ]]; then LAUNCH+=(--cpu-bind=cores); fi
      read -r -a extra <<<"${SRUN_EXTRA_ARGS:-}"
      ;;
    mpirun)
      LAUNCH=(mpirun -np "$ntasks")
      if [[ $kind == cpu ]]; then
        # Ranks fill the slots SLURM gave each node (one per task), each bound to its own cpus
        # cores (PE: processing elements per rank), so that its OpenMP threads own them.
        LAUNCH+=(--map-by "slot:PE=${cpus}" --bind-to core)
      else
        # One rank per GPU, G per node. Ranks are not bound: a GPU rank is one host thread that
        # mostly waits on its device, and a wrong core guess would cost more than it gains.
        LAUNCH+=(--map-by "ppr:${per_node}:node" --bind-to none)
      fi
      # OpenMP's settings and every NCCL_* variable set here (NCCL_NVLS_ENABLE, NCCL_SOCKET_IFNAME,
      # NCCL_IB_HCA, NCCL_DEBUG...: docs/SLURM.md, "Multi-node GPU jobs"), so that ranks on other nodes
      # get them also where mpirun starts them over ssh rather than through SLURM.
      local name
      for name in OMP_NUM_THREADS OMP_PROC_BIND OMP_PLACES $(compgen -e | grep '^NCCL_' | sort); do
        if [[ -n ${!name:-} ]]; then LAUNCH+=(-x "$name=${!name}"); fi
      done
      read -r -a extra <<<"${MPIRUN_EXTRA_ARGS:-}"
      ;;
    *)
      cnn_log "LAUNCHER must be srun or mpirun, not '${LAUNCHER}'"
      return 2
      ;;
  esac
  LAUNCH+=("${extra[@]}")
}

# CPU ranks: one OpenMP thread per allocated CPU (cnn_mpi itself takes its --threads default from
# SLURM_CPUS_PER_TASK; OMP_NUM_THREADS tells the OpenMP runtime the same). Threads are pinned to
# cores only where each rank's affinity mask is its own cores: mpirun binds (cnn_launch_line);
# srun binds only if the cluster's TaskPlugin does (task/affinity or task/cgroup). Without a
# binding every rank sees all the node's cores, and OMP_PROC_BIND would put every rank's thread 0
# on the same core. Values already in the environment win. Sets CNN_PINNING to yes or no.
cnn_setup_cpu_threads() {
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}
  CNN_PINNING=yes
  if [[ ${LAUNCHER:-srun} == srun && -n ${SLURM_JOB_ID:-} ]] &&
    ! scontrol show config 2>/dev/null | grep -Eq '^TaskPlugin .*(affinity|cgroup)'; then
    CNN_PINNING=no
  fi
  if [[ $CNN_PINNING == yes ]]; then
    export OMP_PROC_BIND=${OMP_PROC_BIND:-close} OMP_PLACES=${OMP_PLACES:-cores}
  fi
}

# Prints a command line so that it can be pasted back into a shell as it is.
cnn_print_line() {
  local word line=""
  for word in "$@"; do line+="$(printf '%q' "$word") "; done
  echo "${line% }"
}

# Settings every start logs: which job, which start of it, where, how many ranks.
cnn_log_start() {
  cnn_log "start $((${SLURM_RESTART_COUNT:-0} + 1)) of job ${SLURM_JOB_ID:-none} (SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0})" \
    "on ${SLURM_JOB_NODELIST:-$(hostname -s)}: ${SLURM_NTASKS:-?} tasks, ${SLURM_CPUS_PER_TASK:-?} CPUs per task," \
    "launcher ${LAUNCHER:-srun}"
}

# Runs "$@" (the launch line) so that signals sent to the batch shell reach the trainer, and sets
# CNN_RC to its exit code and CNN_STOP_REQUESTED to 1 if such a signal came.
#
# Why not just exec the launcher: SLURM signals the batch shell alone (--signal=B:USR1@margin,
# scancel -b -s USR1), and bash runs a trap only when its foreground command returns, so a trap
# around a foreground srun would wait for the whole training. The launcher therefore runs in the
# background and the shell sits in `wait`, which a trapped signal interrupts at once.
#
# What is forwarded, and why exactly once: cnn_mpi stops on the first SIGUSR1/SIGTERM/SIGINT
# (every rank checkpoints at the next step boundary and exits with 5), but takes a SECOND signal
# as "do not wait for the checkpoint" and exits at once. So each rank must get one signal:
#  - SIGUSR1 and SIGINT reach this shell alone (B: and -b mean "the batch shell only"; measured on
#    Slurm 22.05): forwarded once, as SIGUSR1, to the launcher. srun passes it to every task, and
#    mpirun to every rank (Open MPI forwards SIGUSR1/SIGUSR2; SIGTERM would make it abort the job).
#  - SIGTERM comes from a time limit, scancel or preemption, and then SLURM sends it to every
#    process of the job, the ranks included: they already have it, so it is NOT forwarded (a
#    forwarded copy would be their second signal). CNN_FORWARD_TERM=1 forwards it anyway, for a
#    site that sends SIGTERM to the batch shell alone (--signal=B:TERM@margin).
#  - Further signals are logged and not forwarded.
cnn_run() {
  CNN_STOP_REQUESTED=0
  _cnn_forwarded=0
  _cnn_interrupted=0
  _cnn_pid=""
  trap '_cnn_on_signal USR1' USR1
  trap '_cnn_on_signal INT' INT
  trap '_cnn_on_signal TERM' TERM
  "$@" &
  _cnn_pid=$!
  # A request that came while the launcher was being started could not be forwarded yet.
  if [[ $CNN_STOP_REQUESTED == 1 && $_cnn_forwarded == 0 ]]; then _cnn_forward; fi
  local code
  CNN_RC=""
  while :; do
    _cnn_interrupted=0
    code=0
    wait "$_cnn_pid" || code=$?
    # 127: the previous round already collected the status (a signal came just as the launcher
    # exited); keep that one.
    if [[ $code == 127 && -n $CNN_RC ]]; then break; fi
    CNN_RC=$code
    # A trapped signal makes `wait` return 128+signal while the launcher still runs: wait again.
    if ((_cnn_interrupted && code > 128)); then continue; fi
    break
  done
  trap - USR1 INT TERM
}

_cnn_on_signal() {
  _cnn_interrupted=1
  CNN_STOP_REQUESTED=1
  if [[ $1 == TERM && ${CNN_FORWARD_TERM:-0} != 1 ]]; then
    cnn_log "got SIGTERM: SLURM sends it to every rank as well, so it is not forwarded; the trainer checkpoints and stops"
  elif ((_cnn_forwarded)); then
    cnn_log "got SIG$1: a stop request was forwarded already (a second one would make the trainer skip its checkpoint)"
  elif [[ -z $_cnn_pid ]]; then
    cnn_log "got SIG$1 before the launch: the trainer is told to stop as soon as it starts"
  else
    cnn_log "got SIG$1: forwarding SIGUSR1 to the launcher; the trainer checkpoints and stops"
    _cnn_forward
  fi
}

_cnn_forward() {
  _cnn_forwarded=1
  kill -USR1 "$_cnn_pid" 2>/dev/null || true
}
