#!/usr/bin/env bash
# tools/slurm/start-cluster.sh DIR
#
# Starts a private, single-node SLURM cluster on localhost, for CI and for trying the job scripts in
# jobs/ without a real cluster: one munged, one slurmctld, one slurmd, all of this machine's CPUs.
# Written for Debian 12 (Slurm 22.05, MUNGE 0.5) without systemd, running as root: package scripts
# start no services there, so every daemon is started here, in the foreground (-D/-F) under setsid,
# which makes $! the daemon's own PID. Everything (config, state, spool, logs, PIDs) lives under DIR,
# nothing touches /etc/slurm, /etc/munge or /run.
#
# Afterwards:  source DIR/env.sh            (exports SLURM_CONF; jobs inherit it through sbatch)
#              tools/slurm/wait-job.sh ID    (waits for a job, exits with its exit code)
#              tools/slurm/stop-cluster.sh DIR   (stops exactly the daemons started here, by PID)
#
# Exit codes: 0 up (node idle), 77 the packages are missing and could not be installed, 1 anything else.
# On failure it stops whatever it had already started and prints the daemons' logs.
#
# Environment (all optional):
#   SLURM_INSTALL=1      install missing packages with tools/install-deps.sh --with-slurm (0: never)
#   SLURMCTLD_PORT, SLURMD_PORT   default: the first free pair from 6817/6818 upwards, so that a second
#                        cluster (another checkout, another CI job) on the same host does not collide
#   CRED_EXPIRE=10       munge credential lifetime (s). Slurm holds a requeued job back for
#                        cred_expire+1 s; the default 120 s would make a requeue cycle take minutes
#   NODE_MEM=1000        RealMemory (MB) advertised; above the real memory the node turns 'inval'
#   START_TIMEOUT=60     seconds to wait for the node to become idle
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SOURCE_DIR=$(cd "$HERE/../.." && pwd)
SLURM_INSTALL=${SLURM_INSTALL:-1}
CRED_EXPIRE=${CRED_EXPIRE:-10}
NODE_MEM=${NODE_MEM:-1000}
START_TIMEOUT=${START_TIMEOUT:-60}

log() { echo "[start-cluster] $*" >&2; }
t_start=$(date +%s.%N)
elapsed() { awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f s", b - a }'; }

if [[ $(id -u) -ne 0 ]]; then
  log "must run as root (slurmd launches jobs as their owner, munged/slurmd use root-owned files)"
  exit 1
fi

# ---------------------------------------------------------------- packages
# Slurm's mpi/pmix plugin dlopen()s the unversioned libpmix.so, which only libpmix-dev ships: without
# it every srun under MpiDefault=pmix fails ("can not load PMIx library").
have_packages() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null &&
    command -v munged >/dev/null && compgen -G "/usr/lib/*/pmix2/lib/libpmix.so" >/dev/null
}
if ! have_packages; then
  if [[ $SLURM_INSTALL != 1 ]]; then
    log "SLURM packages missing and SLURM_INSTALL=$SLURM_INSTALL"
    exit 77
  fi
  log "installing the SLURM packages (tools/install-deps.sh --with-slurm)"
  if ! bash "$SOURCE_DIR/tools/install-deps.sh" --with-slurm >&2 || ! have_packages; then
    log "could not install slurmctld/slurmd/slurm-client/munge/libpmix-dev"
    exit 77
  fi
  log "packages installed after $(elapsed)"
fi


# ---------------------------------------------------------------- a previous instance in DIR
mkdir -p "$1"
DIR=$(cd "$1" && pwd)
if [[ -s $DIR/pids ]]; then
  log "$DIR/pids exists: stopping that earlier cluster first"
  "$HERE/stop-cluster.sh" "$DIR" || true
fi

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if [[ -z ${SLURMCTLD_PORT:-} && -z ${SLURMD_PORT:-} ]]; then
  SLURMCTLD_PORT=6817
  while ! port_free "$SLURMCTLD_PORT" || ! port_free $((SLURMCTLD_PORT + 1)); do
    SLURMCTLD_PORT=$((SLURMCTLD_PORT + 10))
    if ((SLURMCTLD_PORT > 7000)); then log "no free port pair in 6817..7000"; exit 1; fi
  done
  SLURMD_PORT=$((SLURMCTLD_PORT + 1))
fi
SLURMCTLD_PORT=${SLURMCTLD_PORT:?set both SLURMCTLD_PORT and SLURMD_PORT, or neither}
SLURMD_PORT=${SLURMD_PORT:?set both SLURMCTLD_PORT and SLURMD_PORT, or neither}
for port in "$SLURMCTLD_PORT" "$SLURMD_PORT"; do
  port_free "$port" || { log "port $port on 127.0.0.1 is in use"; exit 1; }
done

# Every start is a fresh cluster: no job state survives, job IDs restart at 1.
rm -rf "$DIR/state" "$DIR/spool" "$DIR/tmp" "$DIR/munge" "$DIR/log" "$DIR/pids.stopped"
mkdir -p "$DIR/state" "$DIR/spool" "$DIR/tmp" "$DIR/munge" "$DIR/log"
# munged refuses a socket whose directory, or any directory above it, is not searchable by all.
chmod 0755 "$DIR" "$DIR/munge"
d=$DIR
while [[ $d != / ]]; do
  d=$(dirname "$d")
  [[ $(($(stat -c %#a "$d") & 1)) == 1 ]] ||
    { log "munged needs o+x on every directory above its socket: chmod o+x $d"; exit 1; }
done
: >"$DIR/pids"

# From here on, a failure stops what was started and shows why.
on_exit() {
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    log "start failed (exit $rc): logs follow, then the daemons started so far are stopped"
    for f in "$DIR"/log/*; do
      [[ -s $f ]] && { echo "----- $f" >&2; tail -n 40 "$f" >&2; }
    done
    "$HERE/stop-cluster.sh" "$DIR" || true
  fi
}
trap on_exit EXIT

# record NAME PID: stop-cluster.sh reads these lines and checks /proc/PID/comm against NAME.
record() { echo "$1 $2" >>"$DIR/pids"; }

# ---------------------------------------------------------------- munged (private key and socket)
socket=$DIR/munge/munge.socket.2
dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
chmod 0600 "$DIR/munge/munge.key"
# -F: foreground, so $! is munged itself (a self-daemonizing munged leaves a zombie behind here,
# because PID 1 in these VMs reaps orphans only lazily).
setsid munged -F --socket="$socket" --key-file="$DIR/munge/munge.key" \
  --pid-file="$DIR/munge/munged.pid" --seed-file="$DIR/munge/munged.seed" \
  --log-file="$DIR/log/munged.log" --num-threads=2 </dev/null >"$DIR/log/munged.stdout" 2>&1 &
munged_pid=$!
record munged "$munged_pid"
for _ in $(seq 50); do
  munge -S "$socket" -n 2>/dev/null | unmunge -S "$socket" >/dev/null 2>&1 && break
  kill -0 "$munged_pid" 2>/dev/null || { log "munged exited"; exit 1; }
  sleep 0.1
done
munge -S "$socket" -n | unmunge -S "$socket" >/dev/null || { log "munged does not answer"; exit 1; }

# ---------------------------------------------------------------- slurm.conf
host=$(hostname -s)
case $(getent ahostsv4 "$host" | awk 'NR == 1 { print $1 }') in
  127.*) ;;
  *) log "warning: '$host' does not resolve to 127.x; srun binds to what it resolves to (add it to /etc/hosts)" ;;
esac
# The node's topology exactly as slurmd detects it: anything else makes slurmd complain, or, with
# too much memory or too many CPUs, leaves the node invalid and never idle.
hw=$(slurmd -C | head -n 1)
hw() { tr ' ' '\n' <<<"$hw" | sed -n "s/^$1=//p"; }
cpus=$(hw CPUs)
cat >"$DIR/slurm.conf" <<CONF
# Generated by tools/slurm/start-cluster.sh: a private one-node cluster for tests.
ClusterName=cnnci
# The controller must be this host by name; the address pins all traffic to loopback.
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$SLURMCTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket,cred_expire=$CRED_EXPIRE
# NoInAddrAny does not cover slurmctld; NoCtldInAddrAny does. Nothing listens beyond 127.0.0.1.
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
TmpFS=$DIR/tmp
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups here (no systemd): processes are tracked through /proc, tasks are not confined.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.log
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
NodeName=$host NodeHostname=$host NodeAddr=127.0.0.1 CPUs=$cpus Boards=$(hw Boards) SocketsPerBoard=$(hw SocketsPerBoard) CoresPerSocket=$(hw CoresPerSocket) ThreadsPerCore=$(hw ThreadsPerCore) RealMemory=$NODE_MEM State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
echo "export SLURM_CONF=$DIR/slurm.conf" >"$DIR/env.sh"
export SLURM_CONF=$DIR/slurm.conf

# ---------------------------------------------------------------- slurmctld, then slurmd
setsid /usr/sbin/slurmctld -D </dev/null >"$DIR/log/slurmctld.stdout" 2>&1 &
ctld=$!
record slurmctld "$ctld"
for _ in $(seq $((START_TIMEOUT * 5))); do
  scontrol ping 2>/dev/null | grep -q 'is UP' && break
  kill -0 "$ctld" 2>/dev/null || { log "slurmctld exited"; exit 1; }
  sleep 0.2
done
scontrol ping 2>/dev/null | grep -q 'is UP' || { log "slurmctld does not answer"; exit 1; }

setsid /usr/sbin/slurmd -D </dev/null >"$DIR/log/slurmd.stdout" 2>&1 &
slurmd_pid=$!
record slurmd "$slurmd_pid"
state=""
for _ in $(seq $((START_TIMEOUT * 5))); do
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
  [[ $state == idle ]] && break
  kill -0 "$slurmd_pid" 2>/dev/null || { log "slurmd exited"; exit 1; }
  sleep 0.2
done
if [[ $state != idle ]]; then
  sinfo -R >&2 || true
  log "node $host is '$state', not idle, after ${START_TIMEOUT} s"
  exit 1
fi
log "cluster up after $(elapsed): node $host idle with $cpus CPUs, slurmctld port $SLURMCTLD_PORT," \
  "PIDs $(awk '{ printf "%s=%s ", $1, $2 }' "$DIR/pids")"
