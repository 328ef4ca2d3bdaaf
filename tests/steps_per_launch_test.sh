#!/bin/bash
# --steps-per-launch (docs/TRAINING.md, "Steps per launch"): the trainer's chunk loop, on the CPU
# backends, whose Backend::train_chunk runs a chunk's steps one by one. So a chunk must give the very
# bits of the one-step loop, and any difference is the loop's doing:
#  - seq and threads, with dropout, --augment and a warm-up (a new lr every step): --steps-per-launch 7,
#    1 and auto end with bitwise the final checkpoint of the one-step loop; a short last batch too;
#  - --checkpoint-every-steps 10 not aligned with the chunks of 7: the same checkpoints at the same steps;
#  - CNN_TEST_STOP_AFTER_STEPS stops at the same step with the same line, checkpoint and exit 5, and
#    the resume with chunks completes bitwise; a real SIGTERM mid-run stops at a step boundary;
#  - CNN_TEST_NAN_AT: the same one line and exit 4 as without chunks;
#  - CNN_TEST_STALL at a chunk's start: the watchdog fires after one --stall-timeout;
#  - the settings line for each reason a run takes one step per call: 2 ranks, --on-nonfinite skip,
#    stream mode, --trace.
# Usage: steps_per_launch_test.sh BUILD_DIR SOURCE_DIR
BUILD_DIR=$1
SOURCE_DIR=$2
source "$SOURCE_DIR/tests/checkpoint_test_lib.sh"
EXIT_DIVERGED=4

# 2050 samples: 20 batches of 100 and a short one of 50 (a chunk of its own).
RUN=(--data "$DATA" --train-samples 2050 --test-samples 300 --filters 8 --batch 100 --quiet --epochs 2
     --checkpoint-every-steps 10 --keep 10)
# Randomness in every step: dropout's masks and the augmentation's crops and flips; the warm-up gives
# every step its own lr, and adam its own step count.
RANDOM_MODEL=(--model "conv3x3:8/p1 relu maxpool2 dropout:0.3 fc:10" --augment crop:2,flip --optimizer adam
              --lr 0.002 --warmup-steps 15)

checkpoints() { (cd "$1/checkpoints" && ls ckpt-*.h5 | tr '\n' ' '); }
same_checkpoints() {  # NAME DIR_A DIR_B: the same files, each bitwise
  local a b f ok=1
  a=$(checkpoints "$2"); b=$(checkpoints "$3")
  if [ "$a" != "$b" ]; then fail "$1: checkpoints differ: [$a] vs [$b]"; return; fi
  for f in $a; do "$PY" "$COMPARE" exact "$2/checkpoints/$f" "$3/checkpoints/$f" >/dev/null 2>&1 || ok=0; done
  [ "$ok" = 1 ] && pass "$1: the same checkpoints, bitwise: $a" || fail "$1: a checkpoint's bits differ"
}

# ---- (a) the same bits as the one-step loop ---------------------------------------------------------------
for backend in seq threads; do
  run_as "${backend}_1" "$CNN" "${RUN[@]}" "${RANDOM_MODEL[@]}" --backend "$backend" --threads 2 \
    --steps-per-launch 1 --out "$WORK/${backend}_1"
  expect_rc "${backend}_1" 0
  expect_grep "${backend}_1" "$WORK/${backend}_1.out" "steps_per_launch: 1 (--steps-per-launch 1)"
  run_as "${backend}_7" "$CNN" "${RUN[@]}" "${RANDOM_MODEL[@]}" --backend "$backend" --threads 2 \
    --steps-per-launch 7 --out "$WORK/${backend}_7"
  expect_rc "${backend}_7" 0
  expect_grep "${backend}_7" "$WORK/${backend}_7.out" \
    "steps_per_launch: up to 7 (one kernel launch per step: the $backend backend runs one step per kernel launch)"
  same_checkpoints "$backend: --steps-per-launch 7 vs 1 (checkpoints every 10 steps)" "$WORK/${backend}_1" "$WORK/${backend}_7"
done
run_as threads_auto "$CNN" "${RUN[@]}" "${RANDOM_MODEL[@]}" --backend threads --threads 2 --out "$WORK/threads_auto"
expect_rc threads_auto 0
expect_grep threads_auto "$WORK/threads_auto.out" \
  "steps_per_launch: 1 (auto: the threads backend runs one step per kernel launch)"
same_bits "threads: auto vs 1" "$(latest "$WORK/threads_1")" "$(latest "$WORK/threads_auto")"
# A chunk as long as the epoch, and the seed model with momentum: the reference of the stop below.
run_as seed_1 "$CNN" "${RUN[@]}" --backend seq --optimizer momentum --steps-per-launch 1 --out "$WORK/seed_1"
run_as seed_600 "$CNN" "${RUN[@]}" --backend seq --optimizer momentum --steps-per-launch 600 --out "$WORK/seed_600"
expect_grep seed_600 "$WORK/seed_600.out" "steps_per_launch: up to 21 (one kernel launch per step"
same_checkpoints "seed model: --steps-per-launch 600 vs 1" "$WORK/seed_1" "$WORK/seed_600"
# The epoch's rows count every step and time them (timing.csv's step row, metrics.csv's epoch time).
if "$PY" - "$WORK/seed_600" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1] + "/timing.csv")))
step = [float(r["mean_s"]) for r in rows if r["phase"] == "step"]
forward = [float(r["mean_s"]) for r in rows if r["phase"] == "forward"]
sys.exit(0 if len(step) == 2 and all(s > 0 for s in step) and all(f > 0 for f in forward) else 1)
PYEOF
then pass "seed_600: timing.csv times the chunks' steps and phases"; else fail "seed_600: timing.csv lacks step or phase times"; fi

# ---- (b, c) a stop mid-epoch with chunks, and the resume -------------------------------------------------
# 27 steps: the hook's stop comes at step 6 of epoch 2, inside what would be a chunk of 7.
for n in 1 7; do
  run_as "stop_$n" env CNN_TEST_STOP_AFTER_STEPS=27 "$CNN" "${RUN[@]}" --backend seq --optimizer momentum \
    --steps-per-launch "$n" --out "$WORK/stop_$n"
  expect_rc "stop_$n" "$EXIT_STOPPED"
  expect_grep "stop_$n" "$WORK/stop_$n.err" "^stopped by SIGUSR1 at epoch 2 step 6; checkpoint .*ckpt-e0001-s00000027.h5"
done
cmp -s "$WORK/stop_1.err" <(sed "s|/stop_7/|/stop_1/|" "$WORK/stop_7.err") &&
  pass "stop: the same line with chunks as without" || fail "stop: the lines differ"
same_checkpoints "stop: the checkpoints up to the stop" "$WORK/stop_1" "$WORK/stop_7"
run_as resume_7 "$CNN" "${RUN[@]}" --backend seq --optimizer momentum --steps-per-launch 7 --out "$WORK/stop_7" \
  --resume auto
expect_rc resume_7 0
same_bits "stop + resume with chunks vs uninterrupted" "$(latest "$WORK/seed_1")" "$(latest "$WORK/stop_7")"

# A real signal while chunks run: a step boundary, a checkpoint, exit 5, and a bitwise resume.
env CNN_TEST_STEP_DELAY_MS=20 "$CNN" "${RUN[@]}" --backend seq --optimizer momentum --steps-per-launch 5 \
  --out "$WORK/sigterm" >"$WORK/sigterm.out" 2>"$WORK/sigterm.err" &
PID=$!
for _ in $(seq 100); do grep -q "steps_per_launch" "$WORK/sigterm.out" 2>/dev/null && break; sleep 0.05; done
sleep 0.3
kill -TERM "$PID"
wait "$PID"
RC=$?
expect_rc sigterm "$EXIT_STOPPED"
expect_grep sigterm "$WORK/sigterm.err" "^stopped by SIGTERM at epoch [12] step [0-9]*; checkpoint"
run_as sigterm_resume "$CNN" "${RUN[@]}" --backend seq --optimizer momentum --steps-per-launch 5 --out "$WORK/sigterm" \
  --resume auto
expect_rc sigterm_resume 0
same_bits "SIGTERM + resume with chunks vs uninterrupted" "$(latest "$WORK/seed_1")" "$(latest "$WORK/sigterm")"

# ---- (d) a non-finite gradient inside a chunk ------------------------------------------------------------
for n in 1 7; do
  run_as "nan_$n" env CNN_TEST_NAN_AT=0:13 "$CNN" "${RUN[@]}" --backend seq --optimizer momentum \
    --steps-per-launch "$n" --out "$WORK/nan_$n"
  expect_rc "nan_$n" "$EXIT_DIVERGED"
  expect_grep "nan_$n" "$WORK/nan_$n.err" "global step 13 (1-based), layer fc.bias, rank(s) 0;"
  [ "$(wc -l <"$WORK/nan_$n.err")" -eq 1 ] && pass "nan_$n: one line on stderr" || fail "nan_$n: stderr not one line"
done
cmp -s "$WORK/nan_1.err" "$WORK/nan_7.err" && pass "nan: the same line with chunks as without" ||
  fail "nan: the lines differ"
same_checkpoints "nan: the checkpoints before the stop" "$WORK/nan_1" "$WORK/nan_7"

# ---- (f) the stall watchdog inside a chunk: a chunk beats once per step (StepChunk::on_progress), so a
# stall at a chunk's start (CNN_TEST_STALL in its phase, global step 11: the chunk of steps 11-20) fires
# after one --stall-timeout, as in the one-step loop (before, a chunk of N steps was allowed N timeouts).
started=$(date +%s)
run_as stall_chunk env "CNN_TEST_STALL=0:11:steps in one launch" "$CNN" "${RUN[@]}" --backend seq \
  --steps-per-launch 600 --stall-timeout 1 --out "$WORK/stall_chunk"
took=$(($(date +%s) - started))
expect_rc stall_chunk 6
expect_grep stall_chunk "$WORK/stall_chunk.err" "stalled: no progress for 1.* s in phase steps in one launch at global step 11 (--stall-timeout 1.0 s)"
[ "$took" -lt 6 ] && pass "stall_chunk: the abort after $took s (one timeout, not one per step)" ||
  fail "stall_chunk: the abort after $took s"

# ---- (e) runs that take one step per call, and say why -----------------------------------------------------
SHORT=(--data "$DATA" --train-samples 400 --test-samples 100 --filters 4 --batch 100 --threads 1 --quiet --epochs 1
       --steps-per-launch 7)
run_as ranks2 mpi 2 "$CNN" "${SHORT[@]}" --out "$WORK/ranks2"
expect_rc ranks2 0
expect_grep ranks2 "$WORK/ranks2.out" "steps_per_launch: 1 (2 ranks: the threads backend runs one step per kernel launch)"
run_as skip "$CNN" "${SHORT[@]}" --on-nonfinite skip --out "$WORK/skip"
expect_grep skip "$WORK/skip.out" "steps_per_launch: 1 (--on-nonfinite skip)"
run_as trace "$CNN" "${SHORT[@]}" --trace "$WORK/trace.json" --trace-steps 0:2 --out "$WORK/trace"
expect_grep trace "$WORK/trace.out" "steps_per_launch: 1 (--trace)"
run_as convert "$(dirname "$CNN")/cnn_convert" --dataset fashion --data "$DATA" --out "$WORK/h5" --train-samples 400 \
  --test-samples 100
run_as stream "$CNN" "${SHORT[@]}" --dataset hdf5 --data "$WORK/h5" --data-mode stream --out "$WORK/stream"
expect_rc stream 0
expect_grep stream "$WORK/stream.out" "steps_per_launch: 1 (stream mode)"

finish
