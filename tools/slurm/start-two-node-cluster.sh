#!/usr/bin/env bash
# tools/slurm/start-two-node-cluster.sh DIR
#
# Starts a private SLURM cluster of two nodes inside this one machine, for CI and for trying
# multi-node jobs without a cluster:
#
#   this machine's network namespace:  munged; slurmctld as host cnn-head; bridge cnn2n<i>br 198.18.<27+i>.254
#        |                     |
#     veth cnn2n<i>h1       veth cnn2n<i>h2          (the host ends, ports of the bridge)
#        |                     |
#   netns cnn2n<i>-node1    netns cnn2n<i>-node2     (each: its own network stack, eth0 and lo)
#   hostname cnn-node1      hostname cnn-node2       (each: its own UTS namespace)
#   eth0 198.18.<27+i>.1    eth0 198.18.<27+i>.2
#   slurmd -N cnn-node1     slurmd -N cnn-node2      (and everything it starts: job steps, ranks)
#
# Each node is a network namespace with its own hostname; both share this machine's file system (a
# shared path, as on a cluster), its CPUs and its munged socket. The addresses are the project's test
# subnet 198.18.<27+i>.0/24, inside RFC 2544's benchmarking range 198.18.0.0/15 that is never routed:
# the bridge has no uplink, the namespaces have no default route and nothing is forwarded, so no
# packet leaves the machine. Each node sees the machine's hosts file replaced by DIR/hosts (node
# names, and the head as cnn-head), bound over /etc/hosts inside that node's mount namespace only.
# <i> is the first free instance index 0..9 (NET_INDEX picks one), so two clusters can coexist; the
# one-node cluster of start-cluster.sh (127.0.0.1, its own DIR) can run beside it.
#
# Afterwards:  source DIR/env.sh               (exports SLURM_CONF; sbatch/squeue/scontrol from here)
#              tools/slurm/on-node.sh DIR cnn-node2 CMD...   (runs CMD inside a node)
#              tools/slurm/stop-two-node-cluster.sh DIR      (stops the daemons by PID, ends what is
#                                                             left in the nodes, removes the network)
# DIR/nodes lists "NAME ADDRESS NETNS HOST_VETH SLURMD_PID" per node.
#
# Exit codes: 0 up (both nodes idle); 77 this machine cannot host it (not root, no network namespaces
# or veth/bridge support, SLURM packages missing and not installable); 1 anything else. On failure it
# stops whatever it had started, network included, and prints the daemons' logs.
#
# Environment (all optional): SLURM_INSTALL=1, SLURMCTLD_PORT/SLURMD_PORT (default: the first free
# pair from 6917/6918 on the head's address), CRED_EXPIRE=10, NODE_MEM=1000, START_TIMEOUT=60,
# NET_INDEX (default: the first free one).
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SOURCE_DIR=$(cd "$HERE/../.." && pwd)
START_TIMEOUT=${START_TIMEOUT:-60}
SLURM_LIB_TAG=start-two-node-cluster
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HERE/lib.sh"
NODES=(cnn-node1 cnn-node2)

if [[ $(id -u) -ne 0 ]]; then
  slurm_log "must run as root: network namespaces, veth pairs and slurmd need it"
  exit 77
fi
for tool in ip unshare nsenter; do
  command -v "$tool" >/dev/null || { slurm_log "'$tool' missing (tools/install-deps.sh --with-slurm installs iproute2 and util-linux)"; exit 77; }
done
slurm_ensure_packages || exit $?

mkdir -p "$1"
DIR=$(cd "$1" && pwd)
if [[ -s $DIR/pids || -s $DIR/net ]]; then
  slurm_log "$DIR holds an earlier cluster: stopping it first"
  "$HERE/stop-two-node-cluster.sh" "$DIR" || true
fi

# ---------------------------------------------------------------- the instance: names and subnet
link_exists() { ip link show "$1" >/dev/null 2>&1; }
netns_exists() { [[ -e /run/netns/$1 ]]; }
instance_free() { ! link_exists "cnn2n${1}br" && ! netns_exists "cnn2n${1}-node1" && ! netns_exists "cnn2n${1}-node2"; }
if [[ -n ${NET_INDEX:-} ]]; then
  [[ $NET_INDEX =~ ^[0-9]$ ]] || { slurm_log "NET_INDEX must be 0..9, not '$NET_INDEX'"; exit 1; }
  instance_free "$NET_INDEX" || { slurm_log "instance $NET_INDEX is in use (bridge cnn2n${NET_INDEX}br or its namespaces exist)"; exit 1; }
else
  NET_INDEX=""
  for i in 0 1 2 3 4 5 6 7 8 9; do
    if instance_free "$i"; then NET_INDEX=$i; break; fi
  done
  [[ -n $NET_INDEX ]] || { slurm_log "all 10 instances are in use (ip link show type bridge)"; exit 1; }
fi
SUBNET=198.18.$((27 + NET_INDEX))
HEAD_ADDR=$SUBNET.254
BRIDGE=cnn2n${NET_INDEX}br

slurm_fresh_dir "$DIR"
: >"$DIR/net"
: >"$DIR/nodes"
trap 'slurm_on_failed_start $? "$DIR" "$HERE/stop-two-node-cluster.sh" "$DIR"' EXIT

# ---------------------------------------------------------------- the network
# DIR/net records what exists, in creation order, for stop-two-node-cluster.sh (which removes it in
# reverse) even when this script fails half-way.
if ! ip netns add "cnn2n${NET_INDEX}-probe" 2>/dev/null; then
  slurm_log "cannot create network namespaces here (ip netns add failed)"
  exit 77
fi
ip netns del "cnn2n${NET_INDEX}-probe"
if ! ip link add "$BRIDGE" type bridge 2>/dev/null; then
  slurm_log "cannot create a bridge here (ip link add type bridge failed)"
  exit 77
fi
echo "link $BRIDGE" >>"$DIR/net"
ip addr add "$HEAD_ADDR/24" dev "$BRIDGE"
ip link set "$BRIDGE" up

{
  echo "# Generated by tools/slurm/start-two-node-cluster.sh: /etc/hosts inside each node."
  echo "127.0.0.1 localhost"
  echo "$HEAD_ADDR cnn-head"
  for n in 1 2; do echo "$SUBNET.$n ${NODES[n - 1]}"; done
} >"$DIR/hosts"

for n in 1 2; do
  node=${NODES[n - 1]}
  ns=cnn2n${NET_INDEX}-node$n
  veth=cnn2n${NET_INDEX}h$n
  ip netns add "$ns"
  echo "netns $ns" >>"$DIR/net"
  # The node's end is created inside its namespace, named eth0 as on a real node.
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  echo "link $veth" >>"$DIR/net"
  ip link set "$veth" master "$BRIDGE"
  ip link set "$veth" up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip addr add "$SUBNET.$n/24" dev eth0
  ip netns exec "$ns" ip link set eth0 up
done
# Both nodes reach the head and each other before any daemon depends on it.
for n in 1 2; do
  ns=cnn2n${NET_INDEX}-node$n
  for target in "$HEAD_ADDR" "$SUBNET.$((3 - n))"; do
    ok=0
    for _ in $(seq 50); do
      answer=$(ip netns exec "$ns" timeout 2 bash -c "exec 3<>/dev/tcp/$target/9" 2>&1 || true)
      if [[ $answer == *refused* ]]; then ok=1; break; fi
      sleep 0.1
    done
    ((ok)) || { slurm_log "node $n cannot reach $target (no 'connection refused' from port 9 within 5 s)"; exit 1; }
  done
done

# ---------------------------------------------------------------- munged, slurm.conf, slurmctld
slurm_choose_ports "$HEAD_ADDR" 6917
slurm_start_munged "$DIR"
slurm_detect_hardware
head=cnn-head
# Per node: slurmd's spool, and its own TmpFS (bound over DIR/tmp inside the node, as a node-local
# disk: the PMIx plugin of two nodes would otherwise collide on the same step directories there).
for node in "${NODES[@]}"; do
  rm -rf "$DIR/tmp-$node"
  mkdir -p "$DIR/spool/slurmd-$node" "$DIR/tmp-$node"
done
{
  echo "# Generated by tools/slurm/start-two-node-cluster.sh: a private two-node cluster for tests."
  slurm_conf_common "$DIR" cnn2n "$head" "$HEAD_ADDR" slurmd-%n
  # Both nodes are this machine: each advertises all its CPUs.
  for n in 1 2; do
    echo "NodeName=${NODES[n - 1]} NodeHostname=${NODES[n - 1]} NodeAddr=$SUBNET.$n $SLURM_NODE_HW State=UNKNOWN"
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} >"$DIR/slurm.conf"
echo "export SLURM_CONF=$DIR/slurm.conf" >"$DIR/env.sh"
export SLURM_CONF=$DIR/slurm.conf
# slurmctld binds to the address its own hostname resolves to, and insists that SlurmctldHost is
# that hostname: it runs as host cnn-head (a UTS namespace) with DIR/hosts (a mount namespace), in
# this machine's network namespace, where the bridge carries cnn-head's address.
# shellcheck disable=SC2016  # $1 and $2 belong to the inner shell
slurm_start_ctld "$DIR" "$START_TIMEOUT" unshare --uts --mount -- /bin/sh -c \
  'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"' head "$head" "$DIR/hosts"

# ---------------------------------------------------------------- one slurmd per node
# unshare gives the node its hostname (a UTS namespace) and a mount namespace of its own, which keeps
# the binds of DIR/hosts over /etc/hosts and of DIR/tmp-NODE over DIR/tmp inside the node; nsenter
# then enters the node's network.
# (Not `ip netns exec`: it mounts a fresh /sys, without the cgroup hierarchies slurmd needs.) All of
# them exec, so $! is slurmd's own PID, and every process slurmd starts inherits the namespaces.
waits=()
for n in 1 2; do
  node=${NODES[n - 1]}
  ns=cnn2n${NET_INDEX}-node$n
  # shellcheck disable=SC2016  # $1 and $2 belong to the inner shell
  setsid unshare --uts --mount -- nsenter --net="/run/netns/$ns" -- /bin/sh -c \
    'hostname "$1" && mount --bind "$2" /etc/hosts && mount --bind "$3" "$4" && exec /usr/sbin/slurmd -D -N "$1"' \
    node "$node" "$DIR/hosts" "$DIR/tmp-$node" "$DIR/tmp" \
    </dev/null >"$DIR/log/slurmd-$node.stdout" 2>&1 &
  pid=$!
  slurm_record "$DIR" slurmd "$pid"
  echo "$node $SUBNET.$n $ns cnn2n${NET_INDEX}h$n $pid" >>"$DIR/nodes"
  waits+=("$node=$pid")
done
slurm_wait_idle "$START_TIMEOUT" "${waits[@]}"
slurm_log "cluster up after $(slurm_elapsed): nodes ${NODES[*]} ($SUBNET.1, $SUBNET.2) idle with $SLURM_NODE_CPUS CPUs" \
  "each, slurmctld on $HEAD_ADDR:$SLURMCTLD_PORT, PIDs $(awk '{ printf "%s=%s ", $1, $2 }' "$DIR/pids")"
