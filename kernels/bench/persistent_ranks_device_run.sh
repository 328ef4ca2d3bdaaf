#!/usr/bin/env bash
# One device call (2 or 4 GPUs) for the persistent seed kernel's in-kernel exchange (issue 25): builds
# this tree, then, each step under its own time limit:
#   1. gpu_persistent (one GPU: against seq, reruns, chunk boundaries, stop word, NaN hook);
#   2. tests/gpu_persistent_test.sh (one rank) and tests/gpu_persistent_ranks_test.sh (RANKS ranks, 2);
#   3. compute-sanitizer memcheck, racecheck and synccheck on gpu_persistent's stop-word and NaN test,
#      and memcheck and synccheck on 2 ranks of the trainer (5 steps each, the exchange inside);
#   4. tools/bench-scaling.sh on GPUS (default "1 2"), the configurations ONLY (default weak scaling at
#      d = 64 and 256, 1000 images per rank), with the persistent kernel (and DDP beside it with DDP=1)
#      and then with one launch per step.
# SANITIZE=0 leaves 3 out, SCALING=0 leaves 4 out, TESTS=0 leaves 1 and 2 out, SCRIPTS names 2's scripts. Builds in build-gpu;
# logs go to $OUT (default ./gpu-out).
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CNN_FASHION_DIR=$PWD/.carry/fashion-mnist
nvidia-smi -L | tee "$out/gpus.txt"; date -u +%FT%TZ
source "$(dirname "$0")/device_run_lib.sh"
start=$(date +%s)
configure . build-gpu gpu && ninja -C build-gpu -j "$(nproc)" cnn_mpi gpu_persistent >"$out/build.log" 2>&1
echo "build: exit $? at $(($(date +%s) - start)) s"
grep -E "error" "$out/build.log" | head -20
if [[ ${TESTS:-1} == 1 ]]; then
  run 300 persistent build-gpu/tests/gpu_persistent --log_level=test_suite
  grep -E "Leaving test case|error|failure|No errors" "$out/persistent.log" | sed -E 's/.*Leaving test case "([^"]*)".*; testing time: (.*)/  \1 \2/' | head -30
  for t in ${SCRIPTS:-gpu_persistent_ranks_test gpu_persistent_test}; do
    run 420 "$t" env RANKS="${RANKS:-2}" bash "tests/$t.sh" build-gpu .
    grep -E "^(ok|FAIL|SKIP|skip)|passed|failure" "$out/$t.log" | head -40
  done
fi
if [[ ${SANITIZE:-1} == 1 ]]; then
  for tool in memcheck racecheck synccheck; do
    run 150 "sanitize-$tool" compute-sanitizer --tool "$tool" --error-exitcode 1 build-gpu/tests/gpu_persistent \
      --run_test=the_stop_word_and_a_nonfinite_gradient_end_a_chunk_at_a_step_boundary
    tail -3 "$out/sanitize-$tool.log"
  done
  for tool in memcheck synccheck; do
    run 200 "sanitize-ranks-$tool" mpirun -np 2 -x NCCL_NVLS_ENABLE compute-sanitizer --tool "$tool" --error-exitcode 1 \
      build-gpu/cnn_mpi --device gpu --backend cuda --data "$CNN_FASHION_DIR" --train-samples 1000 --test-samples 200 \
      --batch 200 --epochs 1 --steps-per-launch 600 --allreduce mpi --quiet --out "$out/sanitize-ranks-$tool-run"
    grep -E "steps_per_launch|ERROR SUMMARY|error" "$out/sanitize-ranks-$tool.log" | head -6
  done
fi
if [[ ${SCALING:-1} == 1 ]]; then
  gpus=(${GPUS:-1 2})
  only=${ONLY:-$(for g in "${gpus[@]}"; do echo -n "n$g-d64-weak n$g-d256-weak "; done)}
  for path in 600 1; do
    ddp=(SKIP_DDP=1)
    [[ $path == 600 && ${DDP:-0} == 1 ]] && ddp=()
    run 420 "scaling-$path" env OUT="$out/scaling-$path" BINARY=build-gpu/cnn_mpi EPOCHS=5 RUN_TIMEOUT=90 "${ddp[@]}" \
      ONLY="$only" EXTRA="--steps-per-launch $path" bash tools/bench-scaling.sh "${gpus[@]}"
    cat "$out/scaling-$path/table.txt"
  done
fi
echo "total: $(($(date +%s) - start)) s"
