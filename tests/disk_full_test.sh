#!/bin/bash
# A disk that fills during a checkpoint write (docs/CHECKPOINT.md, "Writing atomically"): the run's --out
# is on a small tmpfs that holds two checkpoints but not a third. The third write must give exit 3
# and exactly one stderr line naming the file with "No space left on device" (no crash, no libhdf5
# message); `latest` still names the second, which still evaluates; no .tmp is left. With space
# freed, `--resume auto` completes the run. The writes are asynchronous (a background thread): the
# failure surfaces at the next step boundary or checkpoint, on one rank and on two.
# Needs `mount -t tmpfs` (root). CI runs as root: there ($CI = true) a failed mount fails the test;
# elsewhere it is skipped (exit 77).
# Usage: disk_full_test.sh BUILD_DIR SOURCE_DIR
BUILD_DIR=$1
SOURCE_DIR=$2
source "$SOURCE_DIR/tests/checkpoint_test_lib.sh"
PAGE=4096
MNT="$WORK/small"
trap 'umount "$MNT" 2>/dev/null; rm -rf "$WORK"' EXIT

# One checkpoint's size, from the same settings on an ordinary disk.
run_as measure "$CNN" "${SMALL[@]}" --epochs 1 --out "$WORK/measure"
expect_rc measure 0
BYTES=$(stat -c %s "$(latest "$WORK/measure")")
PAGES=$(( (BYTES + PAGE - 1) / PAGE ))
# Two checkpoints, the small logs and `latest` fit (24 KiB for them, each file takes whole pages);
# what is left after them, at most half a checkpoint plus that allowance, cannot hold a third.
SIZE=$(( (2 * PAGES + PAGES / 2) * PAGE + 24 * 1024 ))

mkdir -p "$MNT"
if ! mount -t tmpfs -o size="$SIZE" tmpfs "$MNT" 2>"$WORK/mount.err"; then
  if [ "${CI:-}" = true ]; then
    echo "FAIL - cannot mount a tmpfs in CI: $(cat "$WORK/mount.err")"; exit 1
  fi
  echo "SKIP: cannot mount a tmpfs (needs root): $(cat "$WORK/mount.err")"; exit 77
fi
pass "tmpfs of $SIZE bytes for checkpoints of $BYTES bytes"

RUN="$MNT/run"
run_as full "$CNN" "${SMALL[@]}" --epochs 1 --checkpoint-every-steps 1 --keep 3 --out "$RUN"
expect_rc full "$EXIT_IO"
[ "$RC" -lt 128 ] && pass "full: not killed by a signal" || fail "full: killed by signal $((RC - 128))"
[ "$(grep -c '' "$WORK/full.err")" -eq 1 ] && pass "full: one stderr line" ||
  { fail "full: $(grep -c '' "$WORK/full.err") stderr lines"; sed 's/^/    | /' "$WORK/full.err" | head -5; }
expect_grep full "$WORK/full.err" "^cnn_mpi: error: $RUN/checkpoints/ckpt-e0000-s00000003.h5.tmp: write failed: No space left on device$"
grep -qi 'no space left' "$WORK/full.err" && pass "full: says 'no space left'" || fail "full: no 'no space left'"
# (Not on cnn_mpi's own line: its path holds mktemp's random letters, which can spell H5.)
grep -v '^cnn_mpi: error:' "$WORK/full.err" | grep -qE 'H5|HDF5|slist' && fail "full: a libhdf5 message on stderr" ||
  pass "full: no libhdf5 message"
ls "$RUN"/core* "$WORK"/core* >/dev/null 2>&1 && fail "full: core file" || pass "full: no core file"
ls "$RUN"/checkpoints/*.tmp >/dev/null 2>&1 && fail "full: a .tmp is left: $(ls "$RUN"/checkpoints/*.tmp)" ||
  pass "full: no .tmp left"
[ "$(cat "$RUN/checkpoints/latest")" = ckpt-e0000-s00000002.h5 ] && pass "full: latest names the previous checkpoint" ||
  fail "full: latest is '$(cat "$RUN/checkpoints/latest")'"
run_as full_eval "$CNN" eval --checkpoint "$(latest "$RUN")" --data "$DATA" --test-samples 100 --threads 1
expect_rc full_eval 0
expect_grep full_eval "$WORK/full_eval.out" "^test_loss"

# Space freed: the same command with --resume auto continues from step 2 and completes.
mount -o remount,size=$((16 * SIZE)) "$MNT" || fail "cannot grow the tmpfs"
run_as resumed "$CNN" "${SMALL[@]}" --epochs 1 --checkpoint-every-steps 1 --keep 3 --out "$RUN" --resume auto
expect_rc resumed 0
expect_grep resumed "$WORK/resumed.out" "resume: from .*ckpt-e0000-s00000002.h5"
[ "$(cat "$RUN/checkpoints/latest")" = ckpt-e0001-s00000020.h5 ] && pass "resumed: the run completed" ||
  fail "resumed: latest is '$(cat "$RUN/checkpoints/latest")'"
same_bits "resumed after a full disk" "$(latest "$WORK/measure")" "$(latest "$RUN")"

# Two ranks: rank 0's background write fails while both train on; the failure rides on the step
# boundary's stop agreement, so both stop there, rank 0 with the same one line, and mpirun exits 3.
rm -rf "$RUN"
mount -o remount,size="$SIZE" "$MNT" || fail "cannot shrink the tmpfs back"
RUN2="$MNT/run2"
run_as full2 mpi 2 "$CNN" "${SMALL[@]}" --epochs 1 --checkpoint-every-steps 1 --keep 3 --out "$RUN2"
expect_rc full2 "$EXIT_IO"
[ "$(grep -c '^cnn_mpi: error:' "$WORK/full2.err")" -eq 1 ] && pass "full2: one error line" ||
  { fail "full2: $(grep -c '^cnn_mpi: error:' "$WORK/full2.err") error lines"; sed 's/^/    | /' "$WORK/full2.err" | head -5; }
expect_grep full2 "$WORK/full2.err" "^cnn_mpi: error: $RUN2/checkpoints/ckpt-e0000-s00000003.h5.tmp: write failed: No space left on device$"
grep -v '^cnn_mpi: error:' "$WORK/full2.err" | grep -qE 'H5|HDF5|slist' && fail "full2: a libhdf5 message on stderr" ||
  pass "full2: no libhdf5 message"
ls "$RUN2"/checkpoints/*.tmp >/dev/null 2>&1 && fail "full2: a .tmp is left" || pass "full2: no .tmp left"
[ "$(cat "$RUN2/checkpoints/latest")" = ckpt-e0000-s00000002.h5 ] && pass "full2: latest names the previous checkpoint" ||
  fail "full2: latest is '$(cat "$RUN2/checkpoints/latest")'"

finish
