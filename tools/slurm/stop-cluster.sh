#!/usr/bin/env bash
# tools/slurm/stop-cluster.sh DIR
#
# Stops the cluster that tools/slurm/start-cluster.sh DIR started: first its remaining jobs
# (scancel, so that no job processes outlive slurmd), then slurmd, slurmctld and munged, each by
# the PID recorded in DIR/pids and only while /proc/PID/comm still names that daemon (a PID reused
# by another process is left alone). Nothing is ever killed by name. SIGTERM, then SIGKILL after
# STOP_TIMEOUT seconds (default 15). A zombie counts as stopped: PID 1 in these VMs reaps late.
# Afterwards DIR/pids is renamed DIR/pids.stopped. Safe to call twice.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
DIR=$1
STOP_TIMEOUT=${STOP_TIMEOUT:-15}
log() { echo "[stop-cluster] $*" >&2; }
[[ -s $DIR/pids ]] || { log "no $DIR/pids: nothing to stop"; exit 0; }

# Is PID still the daemon NAME, and not a zombie?
alive() {
  local comm state
  comm=$(cat "/proc/$2/comm" 2>/dev/null) || return 1
  [[ $comm == "$1" ]] || return 1
  state=$(awk '/^State:/ { print $2 }' "/proc/$2/status" 2>/dev/null) || return 1
  [[ $state != Z ]]
}
pid_of() { awk -v n="$1" '$1 == n { print $2 }' "$DIR/pids"; }

# Jobs first, while slurmctld and slurmd can still end them cleanly.
ctld=$(pid_of slurmctld | head -n 1)
if [[ -f $DIR/slurm.conf && -n $ctld ]] && alive slurmctld "$ctld"; then
  export SLURM_CONF=$DIR/slurm.conf
  if [[ -n $(squeue -h -o %i 2>/dev/null) ]]; then
    log "cancelling the remaining jobs: $(squeue -h -o %i | tr '\n' ' ')"
    squeue -h -o %i | xargs -r scancel >/dev/null 2>&1 || true
    for _ in $(seq 20); do
      [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
      sleep 0.5
    done
  fi
fi

status=0
# One slurmd per node (a two-node cluster records two), then the controller, then munged.
for name in slurmd slurmctld munged; do
  for pid in $(pid_of "$name"); do
    alive "$name" "$pid" || continue
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq $((STOP_TIMEOUT * 10))); do
      alive "$name" "$pid" || break
      sleep 0.1
    done
    if alive "$name" "$pid"; then
      log "$name ($pid) ignored SIGTERM for ${STOP_TIMEOUT} s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
      alive "$name" "$pid" && { log "$name ($pid) is still running"; status=1; }
    fi
    log "stopped $name ($pid)"
  done
done
mv "$DIR/pids" "$DIR/pids.stopped"
exit "$status"
