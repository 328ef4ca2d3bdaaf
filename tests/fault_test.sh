#!/bin/bash
# Faults of a rank (docs/RELIABILITY.md, "A dead or stalled rank"), on 4 CPU ranks:
#   1. SIGKILL of one rank in the middle of an epoch: the whole job exits non-zero within 10 s (the
#      time is printed) with one cnn_mpi line naming the lost rank, and `--resume auto` then ends
#      bitwise equal to an uninterrupted run.
#   2. A rank that stops making progress (test hook CNN_TEST_STALL=RANK:STEP:PHASE) is named by the
#      stall watchdog in ONE line, with its phase, and the job exits 6; the ranks waiting for it in the
#      allreduce stay silent. A stall of rank 0 while writing a checkpoint is named the same way. After
#      each, `--resume auto` ends bitwise equal to the uninterrupted run.
#   3. A rank stopped by SIGSTOP (rank 2, then rank 0): the job exits 6 with ONE cnn_mpi line, from the
#      first waiting rank, naming the stopped rank (the flight recorder), and resumes bitwise.
# Usage: fault_test.sh BUILD_DIR SOURCE_DIR
BUILD_DIR=$1
SOURCE_DIR=$2
source "$SOURCE_DIR/tests/checkpoint_test_lib.sh"
EXIT_STALLED=6
RUN=(--epochs 3 --checkpoint-every-steps 5)

# Seconds since START (a `date +%s.%N` reading), to 0.01 s.
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
# The PID of rank R among mpirun's children (Open MPI puts the rank in each child's environment).
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    [ "$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')" = "$2" ] && echo "$p"
  done
}

run_as ref mpi 4 "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/ref"
expect_rc ref 0
REF=$(latest "$WORK/ref")

# --- 1. a dead rank. The step delay (timing only) keeps the run going while the test aims.
env CNN_TEST_STEP_DELAY_MS=20 "$MPIRUN" --oversubscribe -np 4 -x CNN_TEST_STEP_DELAY_MS "$CNN" "${SMALL[@]}" \
  "${RUN[@]}" --out "$WORK/dead" >"$WORK/dead.out" 2>"$WORK/dead.err" &
MPIRUN_PID=$!
for _ in $(seq 300); do [ -s "$WORK/dead/checkpoints/latest" ] && break; sleep 0.1; done
sleep 0.3  # mid-epoch, between step checkpoints
VICTIM=$(rank_pid "$MPIRUN_PID" 2)
if [ -z "$VICTIM" ]; then fail "dead: rank 2's process not found"; kill -9 "$MPIRUN_PID"; else
  START=$(date +%s.%N)
  kill -KILL "$VICTIM"
  wait "$MPIRUN_PID"
  RC=$?
  SECONDS_TO_EXIT=$(since "$START")
  echo "    job exit $RC, $SECONDS_TO_EXIT s after SIGKILL of rank 2 (pid $VICTIM)"
  [ "$RC" -ne 0 ] && pass "dead: the job exits non-zero ($RC)" || fail "dead: the job exits 0"
  awk -v s="$SECONDS_TO_EXIT" 'BEGIN { exit !(s < 10) }' && pass "dead: exit within 10 s ($SECONDS_TO_EXIT s)" ||
    fail "dead: exit took $SECONDS_TO_EXIT s"
  # The lowest survivor probes its peers when mpirun's SIGTERM comes, and names the dead rank (peer_probe.hpp).
  LINES=$(grep -c '^cnn_mpi: ' "$WORK/dead.err")
  [ "$LINES" -eq 1 ] && grep -q "^cnn_mpi: error: rank 0 on .*: lost rank 2 on .* (process gone" "$WORK/dead.err" &&
    pass "dead: one line names the lost rank 2" || { fail "dead: $LINES cnn_mpi lines, expected one naming rank 2"; grep '^cnn_mpi: ' "$WORK/dead.err"; }
fi
grep -q "^epoch 3/3" "$WORK/dead.out" && fail "dead: the run finished before the kill"
run_as dead_resume mpi 4 "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/dead" --resume auto
expect_rc dead_resume 0
expect_grep dead_resume "$WORK/dead_resume.out" "^resume: from .*ckpt-e000[0-2]-s000000[0-9][0-9].h5"
same_bits "SIGKILL of a rank, then resume" "$REF" "$(latest "$WORK/dead")"

# --- 2. stalls, named by the watchdog. stall CASE HOOK PATTERN: the job exits 6 with one cnn_mpi line.
stall() {
  local name=$1 hook=$2 pattern=$3
  local start
  start=$(date +%s.%N)
  run_as "$name" env CNN_TEST_STALL="$hook" "$MPIRUN" --oversubscribe -np 4 -x CNN_TEST_STALL "$CNN" "${SMALL[@]}" \
    "${RUN[@]}" --stall-timeout 2 --out "$WORK/$name"
  echo "    $name: exit $RC after $(since "$start") s (stall timeout 2 s)"
  expect_rc "$name" "$EXIT_STALLED"
  local lines
  lines=$(grep -c "^cnn_mpi: error:" "$WORK/$name.err")
  [ "$lines" -eq 1 ] && pass "$name: one cnn_mpi line" || { fail "$name: $lines cnn_mpi lines"; cat "$WORK/$name.err"; }
  expect_grep "$name" "$WORK/$name.err" "$pattern"
  run_as "${name}_resume" mpi 4 "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/$name" --resume auto
  expect_rc "${name}_resume" 0
  same_bits "$name, then resume" "$REF" "$(latest "$WORK/$name")"
}
stall stall_compute "2:23:forward/backward" \
  "^cnn_mpi: error: rank 2 on .* stalled: no progress for [0-9.]* s in phase forward/backward at global step 23 (--stall-timeout 2.0 s)"
stall stall_checkpoint "0:10:checkpoint write" \
  "^cnn_mpi: error: rank 0 on .* stalled: no progress for [0-9.]* s in phase checkpoint write at global step 10"

# --- 3. a stopped rank (SIGSTOP: a hung node, a debugger). Every other rank waits for it; they fire one
# after another (rank 0 first), so the job ends with ONE cnn_mpi line, from the first waiting rank, and
# the ranks the launcher then signals leave without a line of their own (it used to be three lines).
stopped() {
  local name=$1 victim=$2 pattern=$3
  env CNN_TEST_STEP_DELAY_MS=20 "$MPIRUN" --oversubscribe -np 4 -x CNN_TEST_STEP_DELAY_MS "$CNN" "${SMALL[@]}" \
    "${RUN[@]}" --stall-timeout 2 --out "$WORK/$name" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  local mpirun_pid=$! pid
  for _ in $(seq 300); do [ -s "$WORK/$name/checkpoints/latest" ] && break; sleep 0.1; done
  pid=$(rank_pid "$mpirun_pid" "$victim")
  if [ -z "$pid" ]; then fail "$name: rank $victim's process not found"; kill -9 "$mpirun_pid"; return; fi
  kill -STOP "$pid"
  wait "$mpirun_pid"
  RC=$?
  kill -KILL "$pid" 2>/dev/null  # should mpirun have left it behind
  expect_rc "$name" "$EXIT_STALLED"
  local lines
  lines=$(grep -c "^cnn_mpi: error:" "$WORK/$name.err")
  [ "$lines" -eq 1 ] && pass "$name: one cnn_mpi line" || { fail "$name: $lines cnn_mpi lines"; grep "^cnn_mpi" "$WORK/$name.err"; }
  expect_grep "$name" "$WORK/$name.err" "$pattern"
  run_as "${name}_resume" mpi 4 "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/$name" --resume auto
  expect_rc "${name}_resume" 0
  same_bits "$name, then resume" "$REF" "$(latest "$WORK/$name")"
}
# The line names the stopped rank, alone, from the flight records (tests/flight_recorder_test.sh checks them).
stopped stopped_rank2 2 "^cnn_mpi: error: rank 0 on .* waited [0-9.]* s for other ranks .*: rank 2 on [^ ]* has not reached it; flight records: "
stopped stopped_rank0 0 "^cnn_mpi: error: rank 1 on .* waited [0-9.]* s for other ranks .*: rank 0 on [^ ]* has not reached it; flight records: "

finish
