#!/bin/bash
# Asynchronous checkpoints (docs/CHECKPOINT.md, "Asynchronous checkpoints"): the write runs on a
# background thread while training goes on, and the crash-safety promises hold as before. The test
# hook CNN_TEST_WRITE_PAUSE_MS=50 makes every write last 300 ms or more, so each one is surely in
# flight while the next steps train.
#   - training goes on during a write: the `checkpoint:` line counts the steps trained meanwhile;
#   - SIGKILL during a background write (CNN_TEST_KILL_DURING_WRITE, before its rename) with --keep 1:
#     `latest` and the one file left are the previous checkpoint, which loads; a resume ends bitwise
#     equal to an uninterrupted run;
#   - a signal's checkpoint waits for the write in flight: the earlier write completes first, the
#     signal's own is complete before the stop line and exit 5, and --keep 1 leaves exactly it;
#   - a failed background write on 2 ranks is in tests/disk_full_test.sh.
# Usage: async_checkpoint_test.sh BUILD_DIR SOURCE_DIR
BUILD_DIR=$1
SOURCE_DIR=$2
source "$SOURCE_DIR/tests/checkpoint_test_lib.sh"

# SMALL without --quiet: the `checkpoint:` lines are the evidence. 20 steps per epoch.
LOUD=()
for arg in "${SMALL[@]}"; do [ "$arg" = --quiet ] || LOUD+=("$arg"); done
RUN=("${LOUD[@]}" --epochs 2 --checkpoint-every-steps 5 --keep 1)

run_as ref "$CNN" "${RUN[@]}" --out "$WORK/ref"
expect_rc ref 0

# --- SIGKILL in the background write of step 10, after its .tmp is complete, before the rename.
run_as kill env CNN_TEST_WRITE_PAUSE_MS=50 CNN_TEST_KILL_DURING_WRITE=2 "$CNN" "${RUN[@]}" --out "$WORK/kill"
expect_rc kill $((128 + 9))
# Step 5's write lasts 300 ms or more; steps 6..10 take milliseconds: they train meanwhile, and step
# 10's checkpoint waits for it (one write in flight at most).
expect_grep kill "$WORK/kill.out" \
  "^checkpoint: .*/ckpt-e0000-s00000005.h5 (.* ms on the training path; written in .* ms in the background, while [1-9][0-9]* step(s) trained)$"
[ "$(cat "$WORK/kill/checkpoints/latest")" = ckpt-e0000-s00000005.h5 ] && pass "kill: latest names step 5" ||
  fail "kill: latest is '$(cat "$WORK/kill/checkpoints/latest")'"
[ "$(ls "$WORK"/kill/checkpoints/*.h5 | wc -l)" -eq 1 ] && pass "kill: --keep 1 left one checkpoint" ||
  fail "kill: checkpoints left: $(ls "$WORK"/kill/checkpoints/)"
[ -e "$WORK/kill/checkpoints/ckpt-e0000-s00000010.h5.tmp" ] && pass "kill: step 10's .tmp is left" ||
  fail "kill: no .tmp of step 10"
run_as kill_eval "$CNN" eval --checkpoint "$(latest "$WORK/kill")" --data "$DATA" --test-samples 500 --threads 1
expect_rc kill_eval 0
expect_grep kill_eval "$WORK/kill_eval.out" "^test_loss [0-9.]*  test_acc [0-9.]*%"
run_as kill_resume "$CNN" "${RUN[@]}" --out "$WORK/kill" --resume auto
expect_rc kill_resume 0
expect_grep kill_resume "$WORK/kill_resume.out" "resume: from .*ckpt-e0000-s00000005.h5"
same_bits "resumed after a SIGKILL in the background write" "$(latest "$WORK/ref")" "$(latest "$WORK/kill")"

# --- SIGUSR1 after step 7 (test hook), while step 5's write is in flight: the stop's checkpoint waits
# for it, then writes step 7 and finishes that write before the stop line.
run_as sig env CNN_TEST_WRITE_PAUSE_MS=50 CNN_TEST_STOP_AFTER_STEPS=7 "$CNN" "${RUN[@]}" --out "$WORK/sig"
expect_rc sig "$EXIT_STOPPED"
expect_grep sig "$WORK/sig.err" "^stopped by SIGUSR1 at epoch 1 step 7; checkpoint .*/ckpt-e0000-s00000007.h5$"
lines=$(grep -n '^checkpoint: ' "$WORK/sig.out")
if [[ $(sed -n 1p <<<"$lines") == *"ckpt-e0000-s00000005.h5 ("*"while "[12]" step(s) trained)" &&
      $(sed -n 2p <<<"$lines") == *"ckpt-e0000-s00000007.h5 ("*"while 0 step(s) trained)" && -z $(sed -n 3p <<<"$lines") ]]; then
  pass "sig: step 5's write, in flight at the signal, completed first; then step 7's"
else
  fail "sig: checkpoint lines: $lines"
fi
[ "$(cat "$WORK/sig/checkpoints/latest")" = ckpt-e0000-s00000007.h5 ] && pass "sig: latest names step 7" ||
  fail "sig: latest is '$(cat "$WORK/sig/checkpoints/latest")'"
[ "$(ls "$WORK/sig/checkpoints/")" = "$(printf 'ckpt-e0000-s00000007.h5\nlatest')" ] &&
  pass "sig: step 7's checkpoint alone (--keep 1), no .tmp" || fail "sig: left $(ls "$WORK/sig/checkpoints/" | tr '\n' ' ')"
run_as sig_resume "$CNN" "${RUN[@]}" --out "$WORK/sig" --resume auto
expect_rc sig_resume 0
same_bits "resumed after a stop during a background write" "$(latest "$WORK/ref")" "$(latest "$WORK/sig")"

finish
