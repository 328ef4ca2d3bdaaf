#!/usr/bin/env bash
# tools/slurm/stop-two-node-cluster.sh DIR
#
# Stops the cluster that tools/slurm/start-two-node-cluster.sh DIR started, also a half-started one:
#  1. its jobs and daemons, through stop-cluster.sh (scancel, then the slurmds, slurmctld and munged
#     by the PIDs in DIR/pids);
#  2. whatever still runs inside its nodes (a job step on a node that was cut off, a rank whose
#     slurmd is gone): exactly the processes `ip netns pids` lists for the namespaces in DIR/net,
#     which only this cluster's slurmds could have started. SIGTERM, then SIGKILL after 5 s;
#  3. the network: the namespaces, veth pairs and the bridge recorded in DIR/net, newest first.
# Afterwards DIR/net is renamed DIR/net.removed. Safe to call twice. Exit code 1 if anything stays.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIR=$1
log() { echo "[stop-two-node-cluster] $*" >&2; }
status=0

if [[ -s $DIR/pids ]]; then
  "$HERE/stop-cluster.sh" "$DIR" || status=1
fi
[[ -s $DIR/net ]] || { log "no $DIR/net: no network to remove"; exit "$status"; }

namespaces=$(awk '$1 == "netns" { print $2 }' "$DIR/net")
ns_pids() {
  local ns
  for ns in $namespaces; do
    [[ -e /run/netns/$ns ]] && ip netns pids "$ns" 2>/dev/null
  done
  return 0
}
leftover=$(ns_pids | tr '\n' ' ')
if [[ -n ${leftover// /} ]]; then
  log "ending what is left inside the nodes: $(for p in $leftover; do printf '%s(%s) ' "$p" "$(cat "/proc/$p/comm" 2>/dev/null)"; done)"
  for p in $leftover; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do
    [[ -z $(ns_pids) ]] && break
    sleep 0.1
  done
  for p in $(ns_pids); do kill -KILL "$p" 2>/dev/null || true; done
  sleep 0.2
  if [[ -n $(ns_pids) ]]; then log "still running inside the nodes: $(ns_pids | tr '\n' ' ')"; status=1; fi
fi

# Newest first: the veths and namespaces, then the bridge. Deleting one end of a veth pair deletes both.
while read -r kind name; do
  case $kind in
    netns) [[ -e /run/netns/$name ]] && { ip netns del "$name" || status=1; } ;;
    link) if ip link show "$name" >/dev/null 2>&1; then ip link del "$name" || status=1; fi ;;
  esac
done < <(tac "$DIR/net")
log "removed $(awk '{ printf "%s %s, ", $1, $2 }' "$DIR/net" | sed 's/, $//')"
mv "$DIR/net" "$DIR/net.removed"
exit "$status"
