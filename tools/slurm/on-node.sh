#!/usr/bin/env bash
# tools/slurm/on-node.sh DIR NODE COMMAND [ARGS...]
#
# Runs COMMAND inside NODE of the two-node cluster that tools/slurm/start-two-node-cluster.sh DIR
# started: in that node's network, hostname (UTS) and mount namespaces, entered through its slurmd
# (nsenter). The file system is the machine's, with the node's own /etc/hosts. Examples:
#   tools/slurm/on-node.sh /tmp/c cnn-node2 hostname          # cnn-node2
#   tools/slurm/on-node.sh /tmp/c cnn-node1 ip -br addr       # lo, eth0 198.18.27.1/24
#   tools/slurm/on-node.sh /tmp/c cnn-node1 getent hosts cnn-node2
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 DIR NODE COMMAND [ARGS...]" >&2
  exit 2
fi
DIR=$1 NODE=$2
shift 2
pid=$(awk -v n="$NODE" '$1 == n { print $5 }' "$DIR/nodes" 2>/dev/null || true)
if [[ -z $pid ]]; then
  echo "on-node: no node '$NODE' in $DIR/nodes (nodes: $(awk '{ printf "%s ", $1 }' "$DIR/nodes" 2>/dev/null))" >&2
  exit 2
fi
if [[ $(cat "/proc/$pid/comm" 2>/dev/null) != slurmd ]]; then
  echo "on-node: the slurmd of $NODE (PID $pid) is not running" >&2
  exit 1
fi
exec nsenter --target "$pid" --net --uts --mount -- "$@"
