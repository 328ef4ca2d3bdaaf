#!/usr/bin/env bash
# One device call (nvidia-h100-x1) that times the general-network path before and after a change:
# builds this tree ("after") and BEFORE_DIR (a checkout of the earlier commit, inside the checkout so
# that it travels, e.g. `git worktree add --detach .carry/before REV`) in parallel, then
#   1. gpu_layers, gpu_layer_networks and gpu_layer_determinism (every layer op against its CPU twin,
#      the backend against seq and the fused one, determinism);
#   2. the cifar preset's ms/epoch, before and after alternated twice;
#   3. the seed model's ms/epoch, before and after alternated twice;
#   4. the whole gpu_backend suite (gpu_backend, gpu_backend_kernels, gpu_backend_randomness) and
#      tests/gpu_train_test.sh on the after tree.
# The figures of docs/PERFORMANCE.md of 2026-11-22T03:08Z came from these steps (BEFORE_DIR at c9a995f;
# that run used a session copy of this script: the same steps, in a different before build folder).
# History: step 2 then also ran the after tree with CNN_CUDA_PDL=0 (dependent launch off); that
# switch is retired, dependent launch is always on where the device supports it.
# Usage, from the tree: BEFORE_DIR=.carry/before OUT=$OUT bash kernels/bench/cifar_before_after_run.sh
set -uo pipefail
before=${BEFORE_DIR:-.carry/before}
out=${OUT:-gpu-out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CNN_FASHION_DIR=$PWD/.carry/fashion-mnist CNN_MNIST_DIR=$PWD/.carry/mnist
source kernels/bench/device_run_lib.sh
start=$(date +%s)
nvidia-smi -L; date -u +%FT%TZ
(configure . build-after after && ninja -C build-after -j 10 gpu_layers gpu_layer_networks gpu_layer_determinism \
   gpu_backend gpu_backend_kernels gpu_backend_randomness cnn_mpi >"$out/build-after.log" 2>&1
 echo "after build $?") &
(configure "$before" "$before/build-before" before && ninja -C "$before/build-before" -j 6 gpu_layers gpu_backend >"$out/build-before.log" 2>&1
 echo "before build $?") &
wait; echo "built at $(($(date +%s) - start)) s"
# alternate NAME LIMIT TEST CASE PATTERN: tests/TEST --run_test=CASE from before, after, before,
# after, printing the lines of each log that match PATTERN.
alternate() {
  local name=$1 limit=$2 test=$3 case=$4 pattern=$5 round v tree
  for round in 1 2; do
    for v in before after; do
      tree=build-after; [[ $v == before ]] && tree="$before/build-before"
      run "$limit" "$name-$v-$round" "$tree/tests/$test" --run_test="$case"
      echo "$name $v round $round:"; grep -E "$pattern" "$out/$name-$v-$round.log"
    done
  done
}
run 150 layers build-after/tests/gpu_layers --log_level=test_suite; tail -2 "$out/layers.log"
run 150 layer-networks build-after/tests/gpu_layer_networks --log_level=test_suite; tail -2 "$out/layer-networks.log"
run 150 layer-determinism build-after/tests/gpu_layer_determinism --log_level=test_suite
tail -2 "$out/layer-determinism.log"
alternate cifar 100 gpu_layers measure_cifar_epoch_time "^(32|128|512) "
alternate seed 60 gpu_backend measure_epoch_time "fused +on"
echo "at $(($(date +%s) - start)) s"
run 150 backend build-after/tests/gpu_backend; tail -2 "$out/backend.log"
run 150 backend-kernels build-after/tests/gpu_backend_kernels; tail -2 "$out/backend-kernels.log"
run 150 backend-randomness build-after/tests/gpu_backend_randomness; tail -2 "$out/backend-randomness.log"
run 300 train bash tests/gpu_train_test.sh build-after .; grep -E "^(ok|FAIL|skip)" "$out/train.log"
echo "total: $(($(date +%s) - start)) s"
