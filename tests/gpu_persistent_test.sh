#!/usr/bin/env bash
# The persistent seed kernel (--steps-per-launch; docs/TRAINING.md, "Steps per launch"; label gpu;
# exit 77 = skipped where no GPU is usable). On --backend cuda with the seed model, at batch 100 and 1000:
#   1. auto measures the persistent kernel against one launch per step and takes the faster: its
#      settings line names the path with both times, the path it took is the one it measured no slower
#      (kernel <= loop in the printed ms for chunks, loop <= kernel for one step per call), and after
#      10 steps its bits are those of the path it took, given explicitly (--steps-per-launch 600 or 1):
#      nothing of the measurement reaches the run;
#   2. a step's bits do not depend on where a chunk begins or ends: --steps-per-launch 600 (a chunk
#      per epoch, cut at the checkpoints; the kernel without auto's measurement, which may take either
#      path where the two are near) and --steps-per-launch 7 end with bitwise the same parameters; a
#      rerun of 600 too;
#   3. a resume from a mid-epoch checkpoint (--checkpoint-every-steps) with chunks ends bitwise as the
#      uninterrupted run; so does a stop by CNN_TEST_STOP_AFTER_STEPS (exit 5, its checkpoint) and a
#      real SIGTERM (wherever it lands: inside a chunk through the stop word, or between chunks);
#   4. CNN_TEST_NAN_AT: the divergence line and exit 4, the newest checkpoint the last good one;
#   5. the kernel's chunks and --steps-per-launch 1 (the graph step, other summation orders) agree
#      within a relative norm of 1e-4 after 10 steps;
#   6. auto stopped after 5 steps and resumed takes the path its checkpoint recorded (no measurement),
#      says so, and ends bitwise as that path given explicitly.
# Usage: gpu_persistent_test.sh BUILD_DIR SOURCE_DIR   (env: CNN_FASHION_DIR, PYTHON)
source "$2/tests/gpu_script_lib.sh" "$1" "$2"
skip_unless_gpu_runs h5py

# run NAME ARGS...: the trainer, its output in $work/NAME.out and .err; sets rc.
run() {
  local name=$1
  shift
  "$binary" "$@" --out "$work/$name" >"$work/$name.out" 2>"$work/$name.err"
  rc=$?
}
expect_rc() {  # NAME EXPECTED
  if [[ $rc -eq $2 ]]; then pass "$1: exit $rc"; else fail "$1: exit $rc, expected $2: $(tail -2 "$work/$1.err" | xargs)"; fi
}

for batch in 100 1000; do
  # 6000 images: 60 or 6 steps an epoch, and a checkpoint every 25 or 4 steps, inside an epoch.
  every=$((batch == 100 ? 25 : 4))
  seed=(--device gpu --backend cuda --data "$fashion" --train-samples 6000 --test-samples 1000 --batch "$batch"
        --optimizer momentum --epochs 2 --checkpoint-every-steps "$every" --keep 20 --quiet)
  b=b$batch
  epoch=$((6000 / batch))

  # 2. The kernel's chunks, up to an epoch (the run "$b-auto" of the checks below).
  run "$b-auto" "${seed[@]}" --steps-per-launch 600
  expect_rc "$b-auto" 0
  if grep -q "steps_per_launch: up to $epoch (persistent kernel)$" "$work/$b-auto.out"; then
    pass "batch $batch: --steps-per-launch 600 runs the steps in the persistent kernel"
  else
    fail "batch $batch: settings say $(grep steps_per_launch "$work/$b-auto.out" | xargs)"
  fi
  run "$b-auto2" "${seed[@]}" --steps-per-launch 600
  same "batch $batch: two runs of chunks" exact "$b-auto" "$b-auto2"
  run "$b-7" "${seed[@]}" --steps-per-launch 7
  cap=$((epoch < 7 ? epoch : 7))  # the line names no more steps than an epoch has
  grep -q "steps_per_launch: up to $cap (persistent kernel)" "$work/$b-7.out" ||
    fail "batch $batch: --steps-per-launch 7 settings: $(grep steps_per_launch "$work/$b-7.out" | xargs)"
  same "batch $batch: --steps-per-launch 600 vs 7 (chunk boundaries)" exact "$b-auto" "$b-7"


  # 3. A resume from the first mid-epoch checkpoint of epoch 2.
  mid=$(cd "$work/$b-auto/checkpoints" && ls ckpt-e0001-*.h5 | head -1)
  mkdir -p "$work/$b-mid/checkpoints"
  cp "$work/$b-auto/checkpoints/$mid" "$work/$b-mid/checkpoints/"
  run "$b-mid" "${seed[@]}" --steps-per-launch 600 --resume auto
  expect_rc "$b-mid" 0
  same "batch $batch: resume from $mid with chunks vs uninterrupted" exact "$b-auto" "$b-mid"
  stop_after=$((batch == 100 ? 87 : 9))  # mid-epoch 2, not at a checkpoint
  CNN_TEST_STOP_AFTER_STEPS=$stop_after run "$b-stop" "${seed[@]}" --steps-per-launch 600
  expect_rc "$b-stop" 5
  grep -q "^stopped by SIGUSR1 at epoch 2 step $((stop_after - 6000 / batch)); checkpoint" "$work/$b-stop.err" ||
    fail "batch $batch: stop line: $(head -2 "$work/$b-stop.err" | xargs)"
  run "$b-stop" "${seed[@]}" --steps-per-launch 600 --resume auto
  expect_rc "$b-stop" 0
  same "batch $batch: stop after $stop_after steps + resume vs uninterrupted" exact "$b-auto" "$b-stop"

  # 4. A NaN in the gradient of global step 5: stopped before its update.
  CNN_TEST_NAN_AT=0:5 run "$b-nan" "${seed[@]}" --steps-per-launch 600
  expect_rc "$b-nan" 4
  if grep -q "global step 5 (1-based), layer fc.bias, rank(s) 0;" "$work/$b-nan.err" &&
     [[ $(wc -l <"$work/$b-nan.err") -eq 1 ]]; then
    pass "batch $batch: NaN in step 5: one divergence line"
  else
    fail "batch $batch: NaN in step 5: $(head -2 "$work/$b-nan.err" | xargs)"
  fi

  # 5. The kernel's chunks vs the one-step path after 10 steps.
  ten=(--device gpu --backend cuda --data "$fashion" --train-samples $((10 * batch)) --test-samples 1000
       --batch "$batch" --optimizer momentum --epochs 1 --quiet)
  run "$b-ten-auto" "${ten[@]}" --steps-per-launch 600
  run "$b-ten-1" "${ten[@]}" --steps-per-launch 1
  same "batch $batch: --steps-per-launch 600 vs 1 after 10 steps" relnorm=1e-4 "$b-ten-auto" "$b-ten-1"

  # 1. auto: the measured choice, said with both times, and the very bits of the path it took.
  run "$b-ten-measured" "${ten[@]}"
  expect_rc "$b-ten-measured" 0
  auto_choice "batch $batch" "$work/$b-ten-measured.out" 10
  if [[ $taken == kernel ]]; then
    same "batch $batch: auto (the kernel, measured faster) vs --steps-per-launch 600" exact "$b-ten-auto" "$b-ten-measured"
  elif [[ $taken == loop ]]; then
    same "batch $batch: auto (one launch per step, measured faster) vs --steps-per-launch 1" exact "$b-ten-1" "$b-ten-measured"
  fi

  # 6. A resumed auto takes the path its checkpoint recorded, measuring nothing: stopped after 5 steps
  #    and resumed, it ends bitwise as that path given explicitly.
  CNN_TEST_STOP_AFTER_STEPS=5 run "$b-ten-resumed" "${ten[@]}"
  expect_rc "$b-ten-resumed" 5
  auto_choice "batch $batch, stopped" "$work/$b-ten-resumed.out" 10
  first=$taken
  run "$b-ten-resumed" "${ten[@]}" --resume auto
  expect_rc "$b-ten-resumed" 0
  if [[ $first == kernel ]] && grep -q "steps_per_launch: up to 10 (persistent kernel, as the run it resumes took)" "$work/$b-ten-resumed.out"; then
    same "batch $batch: auto stopped and resumed (the kernel, recorded) vs --steps-per-launch 600" exact "$b-ten-auto" "$b-ten-resumed"
  elif [[ $first == loop ]] && grep -q "steps_per_launch: 1 (auto: one launch per step, as the run it resumes took)" "$work/$b-ten-resumed.out"; then
    same "batch $batch: auto stopped and resumed (one launch per step, recorded) vs --steps-per-launch 1" exact "$b-ten-1" "$b-ten-resumed"
  else
    fail "batch $batch: the resume of auto ($first before) says $(grep steps_per_launch "$work/$b-ten-resumed.out" | xargs)"
  fi
done

# A real SIGTERM with chunks: whole epochs of 600 steps run as chunks; wherever it lands, the run stops at
# a step boundary with a checkpoint and the resume ends bitwise as the uninterrupted run.
long=(--device gpu --backend cuda --data "$fashion" --batch 100 --optimizer momentum --epochs 20 --quiet
      --steps-per-launch 600)
run long-ref "${long[@]}"
"$binary" "${long[@]}" --out "$work/long-sig" >"$work/long-sig.out" 2>"$work/long-sig.err" &
pid=$!
# After the first epoch's row (metrics.csv: the header and a row).
for _ in $(seq 400); do [[ $(wc -l <"$work/long-sig/metrics.csv" 2>/dev/null || echo 0) -ge 2 ]] && break; sleep 0.02; done
kill -TERM "$pid"
wait "$pid"
rc=$?
if [[ $rc -eq 5 ]]; then
  run long-sig "${long[@]}" --resume auto
  expect_rc long-sig 0
  same "SIGTERM + resume with chunks vs uninterrupted" exact long-ref long-sig
elif [[ $rc -eq 0 ]]; then
  echo "skip - SIGTERM came after the run's end"
else
  fail "SIGTERM: exit $rc: $(head -2 "$work/long-sig.err" | xargs)"
fi

if ((failures > 0)); then echo "gpu_persistent_test: $failures failure(s)"; exit 1; fi
echo "gpu_persistent_test: passed"
