#!/bin/bash
# Run directories and launches that used to lose data or die without a word (issue 22; docs/RELIABILITY.md,
# "The run directory is owned" and "Ranks agree or stop"), with real processes:
#   1. Two runs started on one --out a moment apart: the second stops with one line naming the first
#      (its pid), and the first completes untouched: its checkpoints, metrics rows and `latest`.
#   2. A holder killed by SIGKILL leaves the lock to the next start: `--resume auto` (a requeued job)
#      takes the directory, keeps the run id, and ends bitwise equal to an uninterrupted run.
#   3. SIGUSR1 during start-up (while the data loads, before the first step) is a stop request, not a
#      death by signal: exit 5, one line, and a checkpoint to resume from.
#   4. What may differ per node does: an MPMD launch whose ranks have different --threads and read the
#      data from different directories holding the same files trains bitwise like a uniform launch,
#      and one with other --threads to 1e-5 (the thread count changes a rank's summation order).
# Usage: ownership_test.sh BUILD_DIR SOURCE_DIR
BUILD_DIR=$1
SOURCE_DIR=$2
source "$SOURCE_DIR/tests/checkpoint_test_lib.sh"
EXIT_STOPPED=5
RUN=(--epochs 2 --checkpoint-every-steps 5)

one_stderr_line() {  # NAME PATTERN: exactly one line on NAME's stderr, matching PATTERN
  local lines
  lines=$(grep -c '' "$WORK/$1.err")
  if [ "$lines" -eq 1 ] && grep -qE -- "$2" "$WORK/$1.err"; then pass "$1: one line: $(head -c 150 "$WORK/$1.err")"
  else fail "$1: $lines stderr lines, expected one matching /$2/"; sed 's/^/    | /' "$WORK/$1.err" | head -5; fi
}

run_as ref "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/ref"
expect_rc ref 0

# --- 1. a second run on a directory in use. The step delay (timing only) keeps the first one running
# (40 steps: 2.4 s, while both later runs start; its checkpoints no longer add their writes to it,
# which run in the background, so the delay alone must cover a loaded machine's start-ups).
env CNN_TEST_STEP_DELAY_MS=60 "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/busy" >"$WORK/first.out" 2>"$WORK/first.err" &
FIRST=$!
for _ in $(seq 200); do grep -q "^startup:" "$WORK/first.out" 2>/dev/null && break; sleep 0.05; done
for extra in "--seed 7" "--resume auto"; do
  name=second${extra/--seed 7/}
  name=${name/--resume auto/_resume}
  # shellcheck disable=SC2086
  run_as "$name" "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/busy" $extra
  expect_rc "$name" "$EXIT_USAGE"
  one_stderr_line "$name" "busy: in use by another run \(pid $FIRST on [^,]*, since [0-9TZ:-]*, run id [0-9a-f]{32}\)"
done
wait "$FIRST"
RC=$?
expect_rc first 0
same_bits "the first run, untouched by the second" "$(latest "$WORK/ref")" "$(latest "$WORK/busy")"
rows=$(($(grep -c '' "$WORK/busy/metrics.csv") - 1))
[ "$rows" -eq 2 ] && pass "the first run's metrics.csv has its 2 rows" || fail "metrics.csv has $rows rows, expected 2"
[ "$(grep -c '' "$WORK/busy/runs.log")" -eq 1 ] && pass "runs.log names one start" || fail "runs.log: $(cat "$WORK/busy/runs.log")"

# --- 2. the holder dies; a requeued start takes the lock and continues the same run.
env CNN_TEST_STEP_DELAY_MS=30 "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/killed" >"$WORK/killed.out" 2>&1 &
VICTIM=$!
for _ in $(seq 200); do [ -s "$WORK/killed/checkpoints/latest" ] && break; sleep 0.05; done
sleep 0.2
kill -KILL "$VICTIM"
wait "$VICTIM" 2>/dev/null
RUN_ID=$(cat "$WORK/killed/run_id")
run_as requeued "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/killed" --resume auto
expect_rc requeued 0
[ "$(cat "$WORK/killed/run_id")" = "$RUN_ID" ] && pass "the requeued start keeps run id $RUN_ID" ||
  fail "run id changed: $RUN_ID -> $(cat "$WORK/killed/run_id")"
grep -q "run_id=$RUN_ID" "$WORK/killed/runs.log" && pass "runs.log names the run id" || fail "runs.log: no run_id=$RUN_ID"
same_bits "killed holder, then --resume auto" "$(latest "$WORK/ref")" "$(latest "$WORK/killed")"

# --- 3. SIGUSR1 before the first step: the handlers are installed before anything that takes time.
# (Not sooner than 0.1 s: before main() runs, the dynamic loader and ASan's start-up leave the default
# action in place; the start-up after it, data and MPI_Init, takes 0.3 s and more.)
for delay in 0.1 0.2; do
  name=early_usr1_$delay
  env CNN_TEST_STEP_DELAY_MS=30 "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/$name" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  PID=$!
  sleep "$delay"
  if grep -q "^startup:" "$WORK/$name.out"; then echo "    ($name: the first step had started; still a valid stop)"; fi
  kill -USR1 "$PID"
  wait "$PID"
  RC=$?
  expect_rc "$name" "$EXIT_STOPPED"
  one_stderr_line "$name" "^stopped by SIGUSR1 at epoch 1 step [0-9]+; checkpoint .*\.h5$"
  run_as "${name}_resume" "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/$name" --resume auto
  expect_rc "${name}_resume" 0
  same_bits "$name, then resume" "$(latest "$WORK/ref")" "$(latest "$WORK/$name")"
done

# --- 4. per-node differences that are allowed: the data directory (same files) and --threads.
cp -r "$DATA" "$WORK/data_copy"
run_as uniform mpi 2 "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/uniform"
expect_rc uniform 0
run_as mpmd_data "$MPIRUN" --oversubscribe -np 1 "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/mpmd_data" : \
  -np 1 "$CNN" "${SMALL[@]}" "${RUN[@]}" --data "$WORK/data_copy" --out "$WORK/mpmd_data"
expect_rc mpmd_data 0
same_bits "MPMD ranks reading the data from other directories, against a uniform launch" \
  "$(latest "$WORK/uniform")" "$(latest "$WORK/mpmd_data")"
# --threads changes how a rank sums its samples: one step agrees to float summation order.
# (--bind-to none: with 2 ranks Open MPI binds each to one core, where --threads 2 is refused.)
ONE_STEP=(--train-samples 100 --epochs 1)
run_as uniform_step mpi 2 "$CNN" "${SMALL[@]}" "${ONE_STEP[@]}" --out "$WORK/uniform_step"
expect_rc uniform_step 0
run_as mpmd_threads "$MPIRUN" --oversubscribe --bind-to none -np 1 "$CNN" "${SMALL[@]}" "${ONE_STEP[@]}" \
  --out "$WORK/mpmd_threads" : -np 1 "$CNN" "${SMALL[@]}" "${ONE_STEP[@]}" --threads 2 --out "$WORK/mpmd_threads"
expect_rc mpmd_threads 0
close_to "MPMD ranks with other --threads, against a uniform launch" "$(latest "$WORK/uniform_step")" \
  "$(latest "$WORK/mpmd_threads")"

finish
