#!/usr/bin/env bash
# One device call for a change to the seed model's fused step (seed_step.cu, conv_backward.cuh):
# builds this tree ("after") and, when BEFORE_DIR holds an export of the commit before it, that tree
# ("before"), in parallel; then, each step under its own time limit:
#   1. the whole gpu_backend suite (after; gpu_backend, gpu_backend_kernels, gpu_backend_randomness):
#      the kernels and the fused step against seq, determinism;
#   2. the seed model's ms/epoch (gpu_backend --run_test=measure_epoch_time), before and after
#      alternated twice, so that drift hits both alike;
#   3. per-kernel durations and limiters of a few eager steps (ncu), after and before.
# Logs go to $OUT (default ./gpu-out); the tool that brings $OUT back may take only 8 files, so the
# timings are also printed. Usage, from the tree:
#   git archive BASE | tar -x -C .carry/before && BEFORE_DIR=.carry/before bash kernels/bench/seed_device_run.sh
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
nvidia-smi -L | tee "$out/gpus.txt"
jobs=$(nproc)
source "$(dirname "$0")/device_run_lib.sh"
start=$(date +%s)
builds=(after)
(configure . build-after after && ninja -C build-after -j "$jobs" gpu_backend gpu_backend_kernels gpu_backend_randomness >"$out/build-after.log" 2>&1
 echo "after: build exit $? at $(($(date +%s) - start)) s") &
if [[ -n ${BEFORE_DIR:-} ]]; then
  builds+=(before)
  (configure "$BEFORE_DIR" "$BEFORE_DIR/build-before" before &&
     ninja -C "$BEFORE_DIR/build-before" -j "$((jobs / 2))" gpu_backend >"$out/build-before.log" 2>&1
   echo "before: build exit $? at $(($(date +%s) - start)) s") &
fi
wait
grep -E "error" "$out/build-after.log" | head -20
binary() { [[ $1 == after ]] && echo build-after/tests/gpu_backend || echo "$BEFORE_DIR/build-before/tests/gpu_backend"; }

run 150 backend build-after/tests/gpu_backend
tail -3 "$out/backend.log"
run 150 backend-kernels build-after/tests/gpu_backend_kernels
tail -3 "$out/backend-kernels.log"
run 150 backend-randomness build-after/tests/gpu_backend_randomness
tail -3 "$out/backend-randomness.log"
for round in 1 2; do
  for build in "${builds[@]}"; do
    run 60 "timing-$build-$round" "$(binary "$build")" --run_test=measure_epoch_time
    grep -E "^[0-9]|batch" "$out/timing-$build-$round.log"
  done
done
if command -v ncu >/dev/null; then
  metrics=gpu__time_duration.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
  metrics+=,sm__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_active
  metrics+=,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
  for build in "${builds[@]}"; do
    run 90 "ncu-$build" ncu --clock-control none --metrics "$metrics" --csv "$(binary "$build")" --run_test=profile_steps
    python3 "$(dirname "$0")/ncu_durations.py" "$out/ncu-$build.log" >"$out/ncu-$build.txt" 2>&1
    echo "per kernel ($build):"
    head -60 "$out/ncu-$build.txt"
  done
fi
echo "total: $(($(date +%s) - start)) s"
