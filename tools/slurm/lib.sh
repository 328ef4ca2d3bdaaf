# shellcheck shell=bash
# tools/slurm/lib.sh: sourced (not run) by start-cluster.sh (one node on localhost) and
# start-two-node-cluster.sh (two nodes in network namespaces). The pieces both clusters share: the
# packages, a fresh state directory, a private munged, the common part of slurm.conf, slurmctld, and
# the wait for idle nodes. Every daemon is recorded in DIR/pids as "NAME PID" for stop-cluster.sh.
#
# The caller sets SLURM_LIB_TAG (the prefix of its log lines) and SOURCE_DIR (the checkout).

slurm_log() { echo "[${SLURM_LIB_TAG:-slurm}] $*" >&2; }

slurm_t0=$(date +%s.%N)
slurm_elapsed() { awk -v a="$slurm_t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f s", b - a }'; }

# Slurm's mpi/pmix plugin dlopen()s the unversioned libpmix.so, which only libpmix-dev ships: without
# it every srun under MpiDefault=pmix fails ("can not load PMIx library").
slurm_have_packages() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null &&
    command -v munged >/dev/null && compgen -G "/usr/lib/*/pmix2/lib/libpmix.so" >/dev/null
}

# Installs the packages if they are missing and SLURM_INSTALL=1 (the default). Returns 77 where they
# cannot be had.
slurm_ensure_packages() {
  slurm_have_packages && return 0
  if [[ ${SLURM_INSTALL:-1} != 1 ]]; then
    slurm_log "SLURM packages missing and SLURM_INSTALL=${SLURM_INSTALL}"
    return 77
  fi
  slurm_log "installing the SLURM packages (tools/install-deps.sh --with-slurm)"
  if ! bash "$SOURCE_DIR/tools/install-deps.sh" --with-slurm >&2 || ! slurm_have_packages; then
    slurm_log "could not install slurmctld/slurmd/slurm-client/munge/libpmix-dev"
    return 77
  fi
  slurm_log "packages installed after $(slurm_elapsed)"
}

# Is nothing listening on ADDR:PORT?
slurm_port_free() { ! (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# Sets SLURMCTLD_PORT and SLURMD_PORT: as given (both or neither), else the first free pair on ADDR
# from FIRST upwards in steps of 10, so that a second cluster on the same host does not collide.
slurm_choose_ports() {
  local addr=$1 first=$2 port
  if [[ -z ${SLURMCTLD_PORT:-} && -z ${SLURMD_PORT:-} ]]; then
    SLURMCTLD_PORT=$first
    while ! slurm_port_free "$addr" "$SLURMCTLD_PORT" || ! slurm_port_free "$addr" $((SLURMCTLD_PORT + 1)); do
      SLURMCTLD_PORT=$((SLURMCTLD_PORT + 10))
      if ((SLURMCTLD_PORT > first + 200)); then slurm_log "no free port pair in $first..$((first + 200))"; return 1; fi
    done
    SLURMD_PORT=$((SLURMCTLD_PORT + 1))
  fi
  SLURMCTLD_PORT=${SLURMCTLD_PORT:?set both SLURMCTLD_PORT and SLURMD_PORT, or neither}
  SLURMD_PORT=${SLURMD_PORT:?set both SLURMCTLD_PORT and SLURMD_PORT, or neither}
  for port in "$SLURMCTLD_PORT" "$SLURMD_PORT"; do
    slurm_port_free "$addr" "$port" || { slurm_log "port $port on $addr is in use"; return 1; }
  done
}

# Every start is a fresh cluster: no job state survives, job IDs restart at 1. Empties DIR/pids.
slurm_fresh_dir() {
  local dir=$1 d
  rm -rf "$dir/state" "$dir/spool" "$dir/tmp" "$dir/munge" "$dir/log" "$dir/pids.stopped"
  mkdir -p "$dir/state" "$dir/spool" "$dir/tmp" "$dir/munge" "$dir/log"
  # munged refuses a socket whose directory, or any directory above it, is not searchable by all.
  chmod 0755 "$dir" "$dir/munge"
  d=$dir
  while [[ $d != / ]]; do
    d=$(dirname "$d")
    [[ $(($(stat -c %#a "$d") & 1)) == 1 ]] ||
      { slurm_log "munged needs o+x on every directory above its socket: chmod o+x $d"; return 1; }
  done
  : >"$dir/pids"
}

# slurm_record DIR NAME PID: stop-cluster.sh reads these lines and checks /proc/PID/comm against NAME.
slurm_record() { echo "$2 $3" >>"$1/pids"; }

# Starts munged with a private key and socket under DIR/munge; sets SLURM_MUNGE_SOCKET.
slurm_start_munged() {
  local dir=$1 pid
  SLURM_MUNGE_SOCKET=$dir/munge/munge.socket.2
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 0600 "$dir/munge/munge.key"
  # -F: foreground, so $! is munged itself (a self-daemonizing munged leaves a zombie behind here,
  # because PID 1 in these VMs reaps orphans only lazily).
  setsid munged -F --socket="$SLURM_MUNGE_SOCKET" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" \
    --log-file="$dir/log/munged.log" --num-threads=2 </dev/null >"$dir/log/munged.stdout" 2>&1 &
  pid=$!
  slurm_record "$dir" munged "$pid"
  for _ in $(seq 50); do
    munge -S "$SLURM_MUNGE_SOCKET" -n 2>/dev/null | unmunge -S "$SLURM_MUNGE_SOCKET" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { slurm_log "munged exited"; return 1; }
    sleep 0.1
  done
  munge -S "$SLURM_MUNGE_SOCKET" -n | unmunge -S "$SLURM_MUNGE_SOCKET" >/dev/null || { slurm_log "munged does not answer"; return 1; }
}

# The topology of this machine as slurmd detects it, for a NodeName line: anything else makes slurmd
# complain, or, with too much memory or too many CPUs, leaves the node invalid and never idle.
# Sets SLURM_NODE_HW ("CPUs=2 Boards=1 ...") and SLURM_NODE_CPUS.
slurm_detect_hardware() {
  local hw
  hw=$(slurmd -C | head -n 1)
  field() { tr ' ' '\n' <<<"$hw" | sed -n "s/^$1=//p"; }
  SLURM_NODE_CPUS=$(field CPUs)
  SLURM_NODE_HW="CPUs=$SLURM_NODE_CPUS Boards=$(field Boards) SocketsPerBoard=$(field SocketsPerBoard)"
  SLURM_NODE_HW+=" CoresPerSocket=$(field CoresPerSocket) ThreadsPerCore=$(field ThreadsPerCore)"
  SLURM_NODE_HW+=" RealMemory=${NODE_MEM:-1000}"
}

# slurm_conf_common DIR CLUSTER CTLD_HOST CTLD_ADDR SLURMD_FILES: the slurm.conf lines both clusters
# share; the caller appends its NodeName and PartitionName lines. SLURMD_FILES is the stem of slurmd's
# spool directory, pid file and log file (with %n for one per node).
slurm_conf_common() {
  local dir=$1 cluster=$2 ctld_host=$3 ctld_addr=$4 slurmd_files=$5
  cat <<CONF
ClusterName=$cluster
# The controller must be this host by name; the address pins all traffic to it.
SlurmctldHost=$ctld_host($ctld_addr)
SlurmctldPort=$SLURMCTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SLURM_MUNGE_SOCKET,cred_expire=${CRED_EXPIRE:-10}
# NoInAddrAny does not cover slurmctld; NoCtldInAddrAny does. Nothing listens beyond the given addresses.
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/$slurmd_files
TmpFS=$dir/tmp
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/$slurmd_files.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/$slurmd_files.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups here (no systemd): processes are tracked through /proc, tasks are not confined.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.log
# Scheduling passes every 2 s (defaults 60 s and 30 s): a requeued job runs again ~12 s after
# the requeue instead of ~2 minutes.
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Debian's Open MPI 4.1 speaks PMIx only (no PMI-2): plain srun launches MPI ranks through pmix.
MpiDefault=pmix
ReturnToService=2
MailProg=/bin/true
# Finished jobs stay visible to scontrol for 10 minutes: wait-job.sh reads their exit code there.
MinJobAge=600
KillWait=5
InactiveLimit=0
CONF
}

# slurm_start_ctld DIR TIMEOUT [WRAPPER...]: starts slurmctld (SLURM_CONF must be exported), through
# WRAPPER if given (a command that ends by exec'ing its arguments), and waits until it answers.
slurm_start_ctld() {
  local dir=$1 timeout=$2 pid
  shift 2
  setsid "$@" /usr/sbin/slurmctld -D </dev/null >"$dir/log/slurmctld.stdout" 2>&1 &
  pid=$!
  slurm_record "$dir" slurmctld "$pid"
  for _ in $(seq $((timeout * 5))); do
    [[ $(scontrol ping 2>/dev/null) == *"is UP"* ]] && return 0
    kill -0 "$pid" 2>/dev/null || { slurm_log "slurmctld exited"; return 1; }
    sleep 0.2
  done
  slurm_log "slurmctld does not answer after $timeout s"
  return 1
}

# slurm_wait_idle TIMEOUT NODE=PID...: waits until every NODE is idle while its slurmd PID lives.
slurm_wait_idle() {
  local timeout=$1 pair node state all_idle
  shift
  for _ in $(seq $((timeout * 5))); do
    all_idle=1
    for pair in "$@"; do
      node=${pair%=*}
      kill -0 "${pair#*=}" 2>/dev/null || { slurm_log "slurmd of $node exited"; return 1; }
      state=$(sinfo -h -n "$node" -o %T 2>/dev/null || true)
      [[ $state == idle ]] || all_idle=0
    done
    ((all_idle)) && return 0
    sleep 0.2
  done
  sinfo -R >&2 || true
  for pair in "$@"; do
    slurm_log "node ${pair%=*} is '$(sinfo -h -n "${pair%=*}" -o %T 2>/dev/null || true)' after $timeout s"
  done
  return 1
}

# An EXIT trap for the start scripts: on failure, the daemons' logs, then stop_command (which stops
# whatever was started so far).
slurm_on_failed_start() {
  local rc=$1 dir=$2
  shift 2
  [[ $rc -eq 0 ]] && return 0
  slurm_log "start failed (exit $rc): logs follow, then what was started so far is stopped"
  for f in "$dir"/log/*; do
    [[ -s $f ]] && { echo "----- $f" >&2; tail -n 40 "$f" >&2; }
  done
  "$@" || true
}
