#!/bin/bash
# Stopping on signals (docs/CHECKPOINT.md, "Signals"): a real SIGTERM sent to a running `mpirun -np 2`
# leaves a checkpoint from which a resume ends bitwise equal to an uninterrupted 2-rank run; SIGUSR1
# to mpirun gives exit 5; a SIGKILL between writing NAME.h5.tmp and the rename (test hook) leaves the previous checkpoint whole
# and the next start removes the stale .tmp; an unwritable checkpoint directory fails before training.
# The second-signal rule (exit 128+signo at once) is tested in test_signals.cpp.
# Usage: signal_test.sh BUILD_DIR SOURCE_DIR
BUILD_DIR=$1
SOURCE_DIR=$2
source "$SOURCE_DIR/tests/checkpoint_test_lib.sh"

# Waits (up to 20 s) until FILE holds PATTERN.
wait_for() {
  for _ in $(seq 200); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

# --- a real SIGTERM to mpirun: Open MPI forwards it to the ranks as SIGTERM and sends SIGKILL
# odls_base_sigkill_timeout (default 1 s) later; the ranks agree at the next step and save first.
LONG=(--epochs 30)
run_as np2ref mpi 2 "$CNN" "${SMALL[@]}" "${LONG[@]}" --out "$WORK/np2ref"
expect_rc np2ref 0
# mpirun itself in the background (not a shell function, whose subshell would take the signal).
# CNN_TEST_STEP_DELAY_MS (test hook, timing only) makes the run last seconds on any machine.
# (`env` execs mpirun, so $! is mpirun's own PID.)
env CNN_TEST_STEP_DELAY_MS=10 "$MPIRUN" --oversubscribe -np 2 -x CNN_TEST_STEP_DELAY_MS "$CNN" "${SMALL[@]}" "${LONG[@]}" --out "$WORK/term" >"$WORK/term.out" 2>"$WORK/term.err" &
MPIRUN_PID=$!
wait_for "$WORK/term.out" "^startup:" || fail "term: the run did not start"
sleep 0.3
kill -TERM "$MPIRUN_PID"
wait "$MPIRUN_PID"
echo "    (mpirun exited with $? after SIGTERM: its own code, not the ranks')"
expect_grep term "$WORK/term.err" "^stopped by SIGTERM at epoch [0-9]* step [0-9]*; checkpoint .*\.h5$"
if grep -q "^epoch 30/30" "$WORK/term.out"; then fail "term: the run finished before the signal came"; fi
run_as term_resume mpi 2 "$CNN" "${SMALL[@]}" "${LONG[@]}" --out "$WORK/term" --resume auto
expect_rc term_resume 0
same_bits "SIGTERM to mpirun, then resume" "$(latest "$WORK/np2ref")" "$(latest "$WORK/term")"

# --- SIGUSR1 to mpirun is forwarded without a SIGKILL behind it; mpirun passes on the ranks' exit 5.
env CNN_TEST_STEP_DELAY_MS=10 "$MPIRUN" --oversubscribe -np 2 -x CNN_TEST_STEP_DELAY_MS "$CNN" "${SMALL[@]}" "${LONG[@]}" --out "$WORK/usr1" >"$WORK/usr1.out" 2>"$WORK/usr1.err" &
MPIRUN_PID=$!
wait_for "$WORK/usr1.out" "^startup:" || fail "usr1: the run did not start"
kill -USR1 "$MPIRUN_PID"
wait "$MPIRUN_PID"
RC=$?
expect_rc usr1 "$EXIT_STOPPED"
expect_grep usr1 "$WORK/usr1.err" "^stopped by SIGUSR1 at epoch"

# --- SIGKILL after NAME.h5.tmp is complete, before the rename (test hook CNN_TEST_KILL_DURING_WRITE).
run_as ref2 "$CNN" "${SMALL[@]}" --epochs 2 --out "$WORK/ref2"
run_as kill1 "$CNN" "${SMALL[@]}" --epochs 1 --out "$WORK/kill"
run_as kill2 env CNN_TEST_KILL_DURING_WRITE=1 "$CNN" "${SMALL[@]}" --epochs 2 --out "$WORK/kill" --resume auto
expect_rc kill2 $((128 + 9))
ls "$WORK"/kill/checkpoints/*.h5.tmp >/dev/null 2>&1 && pass "kill2: a stale .tmp is left" || fail "kill2: no .tmp left"
[ "$(cat "$WORK/kill/checkpoints/latest")" = "ckpt-e0001-s00000020.h5" ] && pass "kill2: latest still names epoch 1" ||
  fail "kill2: latest is $(cat "$WORK/kill/checkpoints/latest")"
run_as kill_eval "$CNN" eval --checkpoint "$(latest "$WORK/kill")" --data "$DATA" --test-samples 500 --threads 1
expect_rc kill_eval 0
expect_grep kill_eval "$WORK/kill_eval.out" "^test_loss [0-9.]*  test_acc [0-9.]*%"
run_as kill3 "$CNN" "${SMALL[@]}" --epochs 2 --out "$WORK/kill" --resume auto
expect_rc kill3 0
expect_grep kill3 "$WORK/kill3.err" "^warning: removed .*ckpt-e0002-s00000040.h5.tmp (partial file"
ls "$WORK"/kill/checkpoints/*.tmp >/dev/null 2>&1 && fail "kill3: .tmp still there" || pass "kill3: .tmp removed"
same_bits "resume after a kill during a write" "$(latest "$WORK/ref2")" "$(latest "$WORK/kill")"

# --- eval on 2 ranks agrees with 1 rank (printed to 6 decimals).
run_as eval2 mpi 2 "$CNN" eval --checkpoint "$(latest "$WORK/kill")" --data "$DATA" --test-samples 500 --threads 1
expect_rc eval2 0
run_as eval1 "$CNN" eval --checkpoint "$(latest "$WORK/kill")" --data "$DATA" --test-samples 500 --threads 1
[ "$(grep -o 'test_acc [0-9.]*' "$WORK/eval1.out")" = "$(grep -o 'test_acc [0-9.]*' "$WORK/eval2.out")" ] &&
  pass "eval: same accuracy on 1 and 2 ranks" || fail "eval: accuracy differs between 1 and 2 ranks"

# --- an unwritable checkpoint directory is found before any training step.
mkdir -p "$WORK/blocked" && : >"$WORK/blocked/checkpoints"
run_as blocked "$CNN" "${SMALL[@]}" --epochs 1 --out "$WORK/blocked"
expect_rc blocked "$EXIT_IO"
grep -q "^startup:" "$WORK/blocked.out" && fail "blocked: training started" || pass "blocked: no training step"
[ "$(wc -l <"$WORK/blocked.err")" -eq 1 ] && pass "blocked: one line on stderr" || fail "blocked: stderr not one line"

finish
