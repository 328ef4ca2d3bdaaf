#!/bin/bash
# The flight recorder (docs/RELIABILITY.md, "Flight recorder"), on 4 CPU ranks with --stall-timeout 2:
#   1. rank 2 stops itself with SIGSTOP as it enters its forward/backward of global step 8
#      (CNN_TEST_SIGSTOP), so it never reaches that step's gradient allreduce;
#   2. rank 0 stops itself with SIGSTOP with half of its first checkpoint written
#      (CNN_TEST_STOP_DURING_WRITE=1), so it never reaches the collective in which the others wait for
#      its verdict on the write.
# Each time the job exits 6 with ONE cnn_mpi line, from the first waiting rank, that names the stopped
# rank as one that has not reached the collective it names (others beside it only where the stopped
# rank froze inside the collective before, with them still in it); and every waiting rank has written
# its ring to RUN_DIR/flight/rank-N.txt: each holds that collective (those others the one before, in
# flight), the reporting rank's as its newest call, in flight, and the calls of a number are the same
# on every rank (tests/check_flight.py).
# Usage: flight_recorder_test.sh BUILD_DIR SOURCE_DIR
BUILD_DIR=$1
SOURCE_DIR=$2
source "$SOURCE_DIR/tests/checkpoint_test_lib.sh"
EXIT_STALLED=6
RANKS=4
RUN=(--epochs 3 --checkpoint-every-steps 5 --stall-timeout 2)

# The PID of rank R among mpirun's children (Open MPI puts the rank in each child's environment).
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    [ "$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')" = "$2" ] && echo "$p"
  done
}

# stopped NAME HOOK_VARIABLE HOOK_VALUE STOPPED_RANK REPORTING_RANK PHASE
stopped() {
  local name=$1 variable=$2 value=$3 victim=$4 reporter=$5 phase=$6
  local start pid="" seen_stopped=no
  start=$(date +%s.%N)
  env "$variable=$value" "$MPIRUN" --oversubscribe -np "$RANKS" -x "$variable" "$CNN" "${SMALL[@]}" "${RUN[@]}" \
    --out "$WORK/$name" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  local mpirun_pid=$!
  # Watch the victim: that it really was stopped (state T) is what makes the rest mean something.
  while kill -0 "$mpirun_pid" 2>/dev/null; do
    [ -z "$pid" ] && pid=$(rank_pid "$mpirun_pid" "$victim")
    [ -n "$pid" ] && [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" = T ] && { seen_stopped=yes; break; }
    sleep 0.05
  done
  wait "$mpirun_pid"
  RC=$?
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null  # should mpirun have left it behind
  echo "    $name: exit $RC after $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
  [ "$seen_stopped" = yes ] && pass "$name: rank $victim was stopped (SIGSTOP)" || fail "$name: rank $victim never seen stopped"
  expect_rc "$name" "$EXIT_STALLED"
  local lines line seq
  lines=$(grep -c "^cnn_mpi: error:" "$WORK/$name.err")
  [ "$lines" -eq 1 ] && pass "$name: one cnn_mpi line" || { fail "$name: $lines cnn_mpi lines"; grep "^cnn_mpi" "$WORK/$name.err"; }
  line=$(grep -m1 "^cnn_mpi: error:" "$WORK/$name.err")
  echo "    $line"
  # The stopped rank is named ("rank R ... has"), by the first waiting rank, with the collective. Other
  # ranks may be named beside it ("ranks R, Q ... have") only where the stopped rank froze inside the
  # collective before, after some ranks had finished it and before those had: check_flight.py holds
  # each of them to that collective, in flight (1 run in 6 to 15 of the checkpoint case on 2 cores).
  local pattern="^cnn_mpi: error: rank $reporter on [^ ]* waited [0-9.]* s for other ranks in phase $phase at global step [0-9]* .*, in collective #[0-9]* ([a-z_]* of [0-9]* B, in-flight): \(rank $victim on [^ ]* has\|ranks \([0-9]* on [^ ]*, \)*[0-9]* on [^ ]* have\) not reached it; flight records: $WORK/$name/flight; aborting the job\$"
  expect_grep "$name" "$WORK/$name.err" "$pattern"
  local named blocked
  named=$(sed -n 's/^cnn_mpi: error: .*, in collective #[0-9]* ([^)]*): ranks\{0,1\} \(.*\) ha[sv]e\{0,1\} not reached it;.*/\1/p' "$WORK/$name.err" |
          head -1 | sed 's/ on [^ ,]*//g; s/ //g')
  [[ ",$named," == *",$victim,"* ]] && pass "$name: the stopped rank $victim is named (named: $named)" ||
    fail "$name: the stopped rank $victim is not among the named ranks '$named'"
  blocked=$(tr ',' '\n' <<<"$named" | grep -vx "$victim" | paste -sd, -)
  seq=$(sed -n 's/^cnn_mpi: error: .*, in collective #\([0-9]*\) .*/\1/p' "$WORK/$name.err" | head -1)
  if out=$("$PY" "$SOURCE_DIR/tests/check_flight.py" "$WORK/$name/flight" "$RANKS" "${seq:-0}" "$victim" "$reporter" \
            "$blocked" 2>&1); then
    pass "$name: $out"
  else
    fail "$name: the flight records:"
    echo "$out" | sed 's/^/    | /'
  fi
}

stopped stopped_in_compute CNN_TEST_SIGSTOP "2:8:forward/backward" 2 0 "allreduce"
# The write runs on rank 0's background thread while training goes on (docs/CHECKPOINT.md), so the
# others wait for the stopped rank at the next collective its training thread has not reached, never
# at the checkpoint: the next step's allreduce, or the step-end agreement where that thread had
# already passed the allreduce when the stop came (which one depends on how fast a step runs).
stopped stopped_in_checkpoint_write CNN_TEST_STOP_DURING_WRITE 1 0 1 '\(allreduce\|step-end agreement\)'

finish
