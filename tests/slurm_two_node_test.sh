#!/usr/bin/env bash
# slurm_two_node_test.sh BUILD_DIR SOURCE_DIR: the job scripts in jobs/ across two nodes.
#
# Starts a private two-node cluster inside this machine (tools/slurm/start-two-node-cluster.sh): two
# network namespaces on a bridge, each node with its own hostname, address and slurmd, one slurmctld,
# addresses in the project's test subnet 198.18.<27+i>.0/24, nothing routed off the machine. The run
# directories and the installed software live in one shared path ($WORK), as on a cluster. Every MPI
# message between the nodes goes over Open MPI's TCP transport (OMPI_MCA_btl=tcp,self, which mpirun
# and srun both pass to the ranks; the same as `--mca btl tcp,self`). Then:
#  (0) the nodes have distinct hostnames and addresses;
#  (a) the installed jobs/train-cpu.sbatch, submitted as
#        sbatch -N 2 --ntasks-per-node=1 --cpus-per-task=1 PREFIX/share/cnn_mpi/jobs/train-cpu.sbatch
#      (srun --mpi=pmix, the installed cnn_mpi from the shared path): one rank on each node, each
#      reporting its own host, local rank 0 of 1 and the CPUs it may use; final weights bitwise equal
#      to a one-node run of the same script with the same 2 ranks and global batch (-N 1 -n 2);
#  (b) jobs/train-preemptible.sbatch on 2 nodes with LAUNCHER=mpirun (mpirun's daemon on the second
#      node started through SLURM, each rank bound to a core): signalled (scancel -b -s USR1) while it
#      trains, it checkpoints, requeues itself, resumes, and ends with the weights of (a);
#  (c) every process of the second node's job killed, under mpirun (its rank and its Open MPI daemon,
#      orted) and under srun with --stall-timeout 4 (its rank): the job ends within 10 s with one line
#      naming the lost host and rank; the newest checkpoint loads;
#  (d) the second node's link cut (its veth down) under srun with --stall-timeout 4: the job ends
#      within 4 + 10 s with one line naming the unreachable host.
# Always stops the cluster and removes its namespaces, veths and bridge, also on failure.
# Needs root and network namespaces. In CI (CI=true) their absence is a failure; elsewhere the test is
# skipped (exit 77) with a message. Takes about 100 s on 2 idle cores. SLURM_TEST_KEEP=1 keeps the
# work directory.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
  exit 2
fi
BUILD_DIR=$(cd "$1" && pwd)
SOURCE_DIR=$(cd "$2" && pwd)
DATA=/usr/share/datasets/fashion-mnist
PY=/usr/bin/python3
TEST_NAME=slurm_two_node_test
# shellcheck source-path=SCRIPTDIR source=slurm_test_lib.sh
source "$SOURCE_DIR/tests/slurm_test_lib.sh"

# Outside CI a machine without root or namespaces skips; CI runs as root and must run this.
cannot() {
  if [[ ${CI:-} == true ]]; then fail "$* (CI=true: CI runs as root with network namespaces)"; fi
  skip "$*"
}
[[ $(id -u) -eq 0 ]] || cannot "needs root for network namespaces, veth pairs and slurmd"
[[ -x $BUILD_DIR/cnn_mpi ]] || fail "no cnn_mpi in $BUILD_DIR (build first)"
if [[ ! -d $DATA ]] || ! "$PY" -c 'import h5py' 2>/dev/null || ! command -v ip >/dev/null; then
  say "Fashion-MNIST, python3-h5py or iproute2 missing: tools/install-deps.sh --with-slurm"
  bash "$SOURCE_DIR/tools/install-deps.sh" --with-slurm || cannot "tools/install-deps.sh --with-slurm failed"
fi
while read -r name; do unset "$name"; done < <(compgen -e | grep '^SLURM_' | grep -vx 'SLURM_CONF')
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

WORK=$(mktemp -d /tmp/cnn-two-node-test.XXXXXX)   # the shared path: software, run directories, outputs
chmod 0755 "$WORK"
CLUSTER=$WORK/cluster
PREFIX=$WORK/prefix
cut_link=""

on_exit() {
  local rc=$?
  set +e
  trap - EXIT
  [[ -n $cut_link ]] && ip link set "$cut_link" up
  if [[ $rc -ne 0 && $rc -ne 77 && -s $CLUSTER/pids ]]; then
    say "---- job queue"
    squeue 2>&1
    for f in "$CLUSTER"/log/slurmctld.log "$CLUSTER"/log/slurmd-*.log; do
      say "---- $f (last 30 lines)"
      tail -n 30 "$f" 2>&1
    done
  fi
  if [[ -s $CLUSTER/pids || -s $CLUSTER/net ]]; then
    "$SOURCE_DIR/tools/slurm/stop-two-node-cluster.sh" "$CLUSTER" || { say "stop-two-node-cluster.sh failed"; rc=1; }
  fi
  if [[ $rc -eq 0 && ${SLURM_TEST_KEEP:-0} != 1 ]]; then rm -rf "$WORK"; else say "work directory kept: $WORK"; fi
  say "done (exit $rc)"
  exit "$rc"
}
trap on_exit EXIT

# ------------------------------------------------------------------------------------ the cluster
say "starting the two-node cluster in $CLUSTER"
start_rc=0
"$SOURCE_DIR/tools/slurm/start-two-node-cluster.sh" "$CLUSTER" || start_rc=$?
((start_rc == 77)) && cannot "no two-node cluster on this machine (see the start script's message above)"
((start_rc == 0)) || fail "tools/slurm/start-two-node-cluster.sh failed (exit $start_rc)"
# shellcheck source=/dev/null
source "$CLUSTER/env.sh"
read -r NODE1 ADDR1 _ _ _ < <(sed -n 1p "$CLUSTER/nodes")
read -r NODE2 ADDR2 _ VETH2 _ < <(sed -n 2p "$CLUSTER/nodes")
on_node() { "$SOURCE_DIR/tools/slurm/on-node.sh" "$CLUSTER" "$@"; }

# ------------------------------------------------------------- (0) two hosts, two addresses
host1=$(on_node "$NODE1" hostname)
host2=$(on_node "$NODE2" hostname)
addr1=$(on_node "$NODE1" ip -4 -o addr show dev eth0 | awk '{ print $4 }')
addr2=$(on_node "$NODE2" ip -4 -o addr show dev eth0 | awk '{ print $4 }')
say "(0) $host1 has $addr1, $host2 has $addr2; this machine is $(hostname)"
[[ $host1 == "$NODE1" && $host2 == "$NODE2" && $host1 != "$host2" && $host1 != $(hostname) ]] ||
  fail "(0) hostnames '$host1' and '$host2', expected $NODE1 and $NODE2, distinct from $(hostname)"
[[ $addr1 == "$ADDR1/24" && $addr2 == "$ADDR2/24" && $addr1 != "$addr2" ]] ||
  fail "(0) addresses '$addr1' and '$addr2', expected $ADDR1/24 and $ADDR2/24"
on_node "$NODE1" getent hosts "$NODE2" | grep -q "^$ADDR2 " || fail "(0) $NODE1 does not resolve $NODE2 to $ADDR2"

cmake --install "$BUILD_DIR" --prefix "$PREFIX" >"$WORK/install.log" 2>&1 || { cat "$WORK/install.log"; fail "cmake --install"; }
JOBS=$PREFIX/share/cnn_mpi/jobs
export CNN_DATA=$DATA CNN_DATASET=fashion OMPI_MCA_btl=tcp,self
# 2 epochs of 3000 images in 100-image steps: 60 steps. (b) trains the same, with a stop in between.
export CNN_EPOCHS=2 CNN_FILTERS=8 CNN_BATCH=100 CNN_TRAIN_SAMPLES=3000 CNN_TEST_SAMPLES=500 CNN_SEED=7
cd "$WORK"

# Submits a job and waits for it: sets JOB_ID and JOB_OUT; fails unless it ends with exit code 0.
run_job() {  # LABEL SBATCH-ARGS...
  local label=$1 rc=0
  shift
  JOB_ID=$(sbatch --parsable -o "$WORK/$label-%j.out" "$@")
  JOB_OUT=$WORK/$label-$JOB_ID.out
  wait_job "$JOB_ID" 180 || rc=$?
  ((rc == 0)) || { show_output "$JOB_OUT"; fail "($label) job $JOB_ID exit code $rc, expected 0"; }
}
# Checks a job's `rank R/N on HOST (local rank L of M, CPUS)` line.
expect_rank_line() {  # LABEL OUTPUT RANK/N HOST LOCAL-RANK LOCAL-SIZE CPUS
  grep -q "^rank $3 on $4 (local rank $5 of $6, $7): " "$2" ||
    { show_output "$2"; fail "($1) no line 'rank $3 on $4 (local rank $5 of $6, $7)'"; }
}

# ------------------------------------------------------------------ (a) train-cpu.sbatch on 2 nodes
command_a="sbatch -N 2 --ntasks-per-node=1 --cpus-per-task=1 $JOBS/train-cpu.sbatch"
say "(a) $command_a"
# shellcheck disable=SC2086  # the command as a user types it
CNN_OUT=$WORK/run-two-nodes run_job a ${command_a#sbatch }
out_a=$JOB_OUT
grep -qF "$PREFIX/bin/cnn_mpi train" "$out_a" || { show_output "$out_a"; fail "(a) the job did not run the installed $PREFIX/bin/cnn_mpi"; }
grep -q "on $NODE1,$NODE2\|on cnn-node\[1-2\]" "$out_a" || { show_output "$out_a"; fail "(a) the job did not get both nodes"; }
# srun here binds nothing (TaskPlugin=task/none): each rank may use both CPUs of its node.
expect_rank_line a "$out_a" 0/2 "$NODE1" 0 1 "cpus 0-1"
expect_rank_line a "$out_a" 1/2 "$NODE2" 0 1 "cpus 0-1"
check_metrics "$WORK/run-two-nodes/metrics.csv" 2 0.5 || fail "(a) metrics.csv"

say "(a) the same on one node: sbatch -N 1 -n 2 --cpus-per-task=1 $JOBS/train-cpu.sbatch"
CNN_OUT=$WORK/run-one-node run_job a1 -N 1 -n 2 --cpus-per-task=1 "$JOBS/train-cpu.sbatch"
one_host=$(sed -n 's/^rank 0\/2 on \([^ ]*\) .*/\1/p' "$JOB_OUT")
expect_rank_line a1 "$JOB_OUT" 0/2 "$one_host" 0 2 "cpus 0-1"
expect_rank_line a1 "$JOB_OUT" 1/2 "$one_host" 1 2 "cpus 0-1"
compare_models "$(latest_checkpoint "$WORK/run-two-nodes")" "$(latest_checkpoint "$WORK/run-one-node")" ||
  fail "(a) the two-node weights differ from the one-node run's"
say "(a) passed"

# ------------------------------------------------- (b) train-preemptible.sbatch on 2 nodes, mpirun
say "(b) LAUNCHER=mpirun sbatch -N 2 --ntasks-per-node=1 --cpus-per-task=1 $JOBS/train-preemptible.sbatch"
run=$WORK/run-preempt
# 100 ms a step (CNN_TEST_STEP_DELAY_MS, timing only): the 30-step second epoch is still running when
# the signal comes after the first epoch's row.
id=$(CNN_TEST_STEP_DELAY_MS=100 LAUNCHER=mpirun CNN_OUT=$run sbatch --parsable -N 2 --ntasks-per-node=1 \
  --cpus-per-task=1 -o "$WORK/b-%j.out" "$JOBS/train-preemptible.sbatch")
out=$WORK/b-$id.out
deadline=$((SECONDS + 120))
until [[ -s $run/metrics.csv && $(wc -l <"$run/metrics.csv") -ge 2 ]]; do
  ((SECONDS < deadline)) || { show_output "$out"; fail "(b) job $id not training after 120 s ($(job_state "$id"))"; }
  sleep 0.3
done
scancel -b -s USR1 "$id"
deadline=$((SECONDS + 60))
until grep -q "requeueing job $id" "$out" 2>/dev/null; do
  ((SECONDS < deadline)) || { show_output "$out"; fail "(b) job $id did not requeue itself within 60 s of the signal"; }
  sleep 0.3
done
stopped_at=$(cat "$run/checkpoints/latest")
say "(b) job $id stopped with $stopped_at and requeued itself"
[[ $stopped_at =~ ^ckpt-e0001-s000000(3[1-9]|[45][0-9])\.h5$ ]] || fail "(b) checkpoint after the stop is '$stopped_at', expected one inside epoch 2"
rc=0
wait_job "$id" 180 || rc=$?
((rc == 0)) || { show_output "$out"; fail "(b) job $id exit code $rc, expected 0"; }
grep -q 'SLURM_RESTART_COUNT=1' "$out" || { show_output "$out"; fail "(b) no second start"; }
grep -q "restart=1, .*resumed_from=.*$stopped_at" "$run/runs.log" || { cat "$run/runs.log"; fail "(b) the second start did not resume from $stopped_at"; }
# mpirun binds each rank to a core (--map-by slot:PE=1 --bind-to core): core 0 of each node.
expect_rank_line b "$out" 0/2 "$NODE1" 0 1 "cpu 0"
expect_rank_line b "$out" 1/2 "$NODE2" 0 1 "cpu 0"
check_metrics "$run/metrics.csv" 2 0.5 || fail "(b) metrics.csv"
compare_models "$(latest_checkpoint "$run")" "$(latest_checkpoint "$WORK/run-two-nodes")" ||
  fail "(b) the preempted two-node run's weights differ from (a)'s"
say "(b) passed"

# A long two-node run for the failures below: 10 epochs of 3000 images at 20 ms a step (~7 s), a
# checkpoint every 10 steps. Sets JOB_ID, JOB_OUT, RUN; returns once both ranks train.
start_long_run() {  # LABEL LAUNCHER [EXTRA CNN_MPI OPTIONS]
  local label=$1 launcher=$2
  RUN=$WORK/run-$label
  JOB_ID=$(CNN_TEST_STEP_DELAY_MS=20 LAUNCHER=$launcher CNN_OUT=$RUN CNN_EPOCHS=10 CNN_CHECKPOINT_EVERY_STEPS=10 \
    CNN_EXTRA_ARGS="${3:-}" sbatch --parsable -N 2 --ntasks-per-node=1 --cpus-per-task=1 -o "$WORK/$label-%j.out" \
    "$JOBS/train-cpu.sbatch")
  JOB_OUT=$WORK/$label-$JOB_ID.out
  local deadline=$((SECONDS + 120))
  until [[ -s $RUN/checkpoints/latest ]] && grep -q "^rank 1/2 on $NODE2 " "$JOB_OUT" 2>/dev/null; do
    ((SECONDS < deadline)) || { show_output "$JOB_OUT"; fail "($label) job $JOB_ID not training after 120 s ($(job_state "$JOB_ID"))"; }
    sleep 0.2
  done
}
# Seconds since a `date +%s.%N` stamp, to 0.1 s.
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
at_most() { awk -v t="$1" -v limit="$2" 'BEGIN { exit !(t <= limit) }'; }
# The job script's last line, written when the launcher has returned.
launcher_returned() { grep -q 'trainer exit code' "$1" 2>/dev/null; }

# ------------------------------------------------------- (c) the second node's processes killed
# mpirun: the node's rank and its Open MPI daemon (orted); mpirun loses the daemon and tears the job
# down, and rank 0 names the lost host in the second between its SIGTERM and its SIGKILL.
# srun: the node's rank (the step daemon there is SLURM's slurmstepd, like slurmd it stays); srun keeps
# the step, and rank 0's wait reaches --stall-timeout 4, where its probe finds the rank gone.
ns2=$(awk -v n="$NODE2" '$1 == n { print $3 }' "$CLUSTER/nodes")
kill_node_two() {  # LAUNCHER PROCESS-NAMES
  local launcher=$1 names=$2 label=c-$1 pid victims=() killed_at took lines newest
  start_long_run "$label" "$launcher" "$([[ $launcher == srun ]] && echo "--stall-timeout 4")"
  for pid in $(ip netns pids "$ns2"); do
    [[ " $names " == *" $(cat "/proc/$pid/comm" 2>/dev/null) "* ]] && victims+=("$pid")
  done
  ((${#victims[@]} == $(wc -w <<<"$names"))) || fail "($label) expected one each of '$names' on $NODE2, found PIDs: ${victims[*]}"
  say "($label) job $JOB_ID trains: SIGKILL to every process of its on $NODE2 ($names: ${victims[*]})"
  killed_at=$(date +%s.%N)
  kill -KILL "${victims[@]}"
  until [[ $(job_state "$JOB_ID") =~ ^(COMPLETED|FAILED|CANCELLED)$ ]]; do
    at_most "$(since "$killed_at")" 30 || { show_output "$JOB_OUT"; fail "($label) job $JOB_ID still $(job_state "$JOB_ID") 30 s after the kill"; }
    sleep 0.2
  done
  took=$(since "$killed_at")
  lines=$(grep -c "^cnn_mpi: error: rank 0 on $NODE1.*lost host $NODE2 (rank 1: process gone" "$JOB_OUT" || true)
  say "($label) job $JOB_ID $(job_state "$JOB_ID") $took s after the kill; the line:"
  grep "^cnn_mpi: " "$JOB_OUT" || true
  at_most "$took" 10 || { show_output "$JOB_OUT"; fail "($label) the job took $took s to end, expected at most 10"; }
  if ((lines != 1 || $(grep -c '^cnn_mpi: ' "$JOB_OUT") != 1)); then
    show_output "$JOB_OUT"
    fail "($label) expected exactly one cnn_mpi line, naming the lost host $NODE2 and rank 1"
  fi
  newest=$(latest_checkpoint "$RUN")
  "$PREFIX/bin/cnn_mpi" eval --checkpoint "$newest" --data "$DATA" --dataset fashion --test-samples 500 \
    >"$WORK/$label-eval.out" 2>&1 || { show_output "$WORK/$label-eval.out"; fail "($label) the newest checkpoint $newest does not load"; }
  say "($label) passed: the newest checkpoint loads: $(tail -n 1 "$WORK/$label-eval.out")"
}
kill_node_two mpirun "orted cnn_mpi"
kill_node_two srun "cnn_mpi"

# -------------------------------------------------------- (d) the second node's link cut (srun)
start_long_run d srun "--stall-timeout 4"
say "(d) job $JOB_ID trains: ip link set $VETH2 down (cuts $NODE2 off)"
cut_link=$VETH2
cut_at=$(date +%s.%N)
ip link set "$VETH2" down
until launcher_returned "$JOB_OUT"; do
  at_most "$(since "$cut_at")" 40 || { show_output "$JOB_OUT"; fail "(d) job $JOB_ID still running 40 s after the cut"; }
  sleep 0.1
done
took=$(since "$cut_at")
say "(d) the launcher returned ${took} s after the cut; the line:"
grep "^cnn_mpi: error: " "$JOB_OUT" || true
lines=$(grep -c "^cnn_mpi: error: rank 0 on $NODE1 waited .*host $NODE2 unreachable (rank 1: no answer" "$JOB_OUT" || true)
at_most "$took" 14 || { show_output "$JOB_OUT"; fail "(d) the job took $took s to end, expected at most --stall-timeout 4 + 10"; }
((lines == 1)) || { show_output "$JOB_OUT"; fail "(d) $lines lines name the unreachable host $NODE2, expected 1"; }
ip link set "$VETH2" up
cut_link=""
# The job's part on the cut-off node ends once it is reachable again.
deadline=$((SECONDS + 60))
until [[ -z $(squeue -h -o %i 2>/dev/null) ]]; do
  ((SECONDS < deadline)) || { squeue; fail "(d) job $JOB_ID still queued 60 s after the link came back"; }
  sleep 0.5
done
say "(d) passed"

say "all passed in $((SECONDS - T0)) s"
