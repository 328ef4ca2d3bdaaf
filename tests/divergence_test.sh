#!/bin/bash
# Divergence on 2 ranks (docs/RELIABILITY.md, "Divergence"), with the test hook CNN_TEST_NAN_AT=RANK:STEP
# that puts a NaN into one rank's own gradient in one global step:
#   stop (the default): both ranks stop together with exit 4 and ONE line giving the step, the rank and
#     the layer; no checkpoint is written after it, so the newest valid checkpoint is the last good one
#     (it evaluates, and a resume from it completes);
#   skip: the step's update is dropped on every rank, the run completes, and the skip is counted in
#     metrics.csv (skipped_steps) and in the end-of-run line; the parameters stay finite and equal on
#     both ranks (the final checkpoint loads).
# Usage: divergence_test.sh BUILD_DIR SOURCE_DIR
BUILD_DIR=$1
SOURCE_DIR=$2
source "$SOURCE_DIR/tests/checkpoint_test_lib.sh"
EXIT_DIVERGED=4
RUN=(--epochs 2 --checkpoint-every-steps 2)
# The hooked 2-rank runs force the overlapped step (auto picks it on some machines, not on others):
# the hook's step must leave it on every rank together, or the ranks pair mismatched collectives and
# hang. The short stall timeout turns such a hang into a failure within seconds.
HOOKED=(--overlap on --stall-timeout 30)

# --- stop: the NaN appears on rank 1 in global step 7; checkpoints exist after steps 2, 4 and 6.
run_as stop env CNN_TEST_NAN_AT=1:7 "$MPIRUN" --oversubscribe -np 2 -x CNN_TEST_NAN_AT "$CNN" "${SMALL[@]}" "${RUN[@]}" \
  "${HOOKED[@]}" --out "$WORK/stop"
expect_rc stop "$EXIT_DIVERGED"
lines=$(grep -c "^cnn_mpi: error:" "$WORK/stop.err")
[ "$lines" -eq 1 ] && pass "stop: one cnn_mpi line" || fail "stop: $lines cnn_mpi lines"
expect_grep stop "$WORK/stop.err" \
  "^cnn_mpi: error: training diverged: non-finite gradient in global step 7 (1-based), layer fc.bias, rank(s) 1;"
[ "$(cat "$WORK/stop/checkpoints/latest")" = "ckpt-e0000-s00000006.h5" ] && pass "stop: latest names step 6" ||
  fail "stop: latest is $(cat "$WORK/stop/checkpoints/latest")"
ls "$WORK"/stop/checkpoints/*s0000000[7-9]* >/dev/null 2>&1 && fail "stop: a checkpoint after the divergence" ||
  pass "stop: no checkpoint after step 6"
run_as stop_eval "$CNN" eval --checkpoint "$(latest "$WORK/stop")" --data "$DATA" --test-samples 500 --threads 1
expect_rc stop_eval 0
# The newest valid checkpoint is what `--resume auto` takes; the run then completes (the hook is gone).
run_as stop_resume mpi 2 "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/stop" --resume auto
expect_rc stop_resume 0
expect_grep stop_resume "$WORK/stop_resume.out" "^resume: from .*ckpt-e0000-s00000006.h5"
run_as ref mpi 2 "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/ref"
same_bits "stop, then resume from the last good checkpoint" "$(latest "$WORK/ref")" "$(latest "$WORK/stop")"

# --- one rank: the same stop, without the gather.
run_as stop1 env CNN_TEST_NAN_AT=0:3 "$CNN" "${SMALL[@]}" "${RUN[@]}" --out "$WORK/stop1"
expect_rc stop1 "$EXIT_DIVERGED"
[ "$(wc -l <"$WORK/stop1.err")" -eq 1 ] && pass "stop1: one line on stderr" || fail "stop1: stderr not one line"
expect_grep stop1 "$WORK/stop1.err" "global step 3 (1-based), layer fc.bias, rank(s) 0;"

# --- skip: the NaN on rank 0 in step 7 is dropped on both ranks.
run_as skip env CNN_TEST_NAN_AT=0:7 "$MPIRUN" --oversubscribe -np 2 -x CNN_TEST_NAN_AT "$CNN" "${SMALL[@]}" "${RUN[@]}" \
  "${HOOKED[@]}" --on-nonfinite skip --out "$WORK/skip"
expect_rc skip 0
expect_grep skip "$WORK/skip.err" "^warning: non-finite gradient in global step 7 (1-based), layer fc.bias, rank(s) 0; update skipped"
expect_grep skip "$WORK/skip.out" "^skipped_steps: 1 "
if [ "$(cut -d, -f8 "$WORK/skip/metrics.csv" | tr '\n' ' ')" = "skipped_steps 1 0 " ]; then pass "skip: metrics.csv counts 1 then 0"
else fail "skip: metrics.csv skipped_steps column: $(cut -d, -f8 "$WORK/skip/metrics.csv" | tr '\n' ' ')"; fi
if "$PY" - "$(latest "$WORK/skip")" <<'PYEOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    ok = all(np.isfinite(f[p][()]).all() for p in ("/model/conv1/weight", "/model/fc/weight", "/model/fc/bias"))
sys.exit(0 if ok else 1)
PYEOF
then pass "skip: final parameters are finite"; else fail "skip: non-finite parameters saved"; fi
# The skipped step changed nothing: the run differs from the reference (one update fewer), yet its
# train loss of epoch 1 is finite (the NaN step's loss was left out).
"$PY" -c "import csv,math,sys; r=list(csv.DictReader(open(sys.argv[1]))); sys.exit(0 if all(math.isfinite(float(x['train_loss'])) for x in r) else 1)" \
  "$WORK/skip/metrics.csv" && pass "skip: train losses finite" || fail "skip: a non-finite train loss was logged"

finish
