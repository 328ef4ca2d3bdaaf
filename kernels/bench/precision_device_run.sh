#!/usr/bin/env bash
# One device call for --precision (issue 24): builds this tree ("after") and BEFORE_DIR (an export of
# the commit before, e.g. `git archive REV | tar -x -C .carry/before`) in parallel, then
#   1. gpu_precision and gpu_precision_steps (tf32 and bf16 against seq, odd shapes, determinism, plans);
#   2. (STEPS includes epochs) the cifar preset's ms/epoch at batch 32, 128, 512 and 2048 in tf32 and
#      bf16; (STEPS includes ab) those and the AB_PRECISIONS (default fp32) after and before,
#      alternated (before, after, before, after);
#   3. (STEPS includes torch) PyTorch's best (../shared/anchors/torch_cifar_best.py, copied into
#      .carry/anchors) in tf32 and bf16, in the same call;
#   4. (STEPS includes script) tests/gpu_precision_test.sh on the after tree;
#   5. (STEPS includes layers) tests/gpu_precision's measure_layer_products: conv2's and conv3's products
#      alone, every tile, the input gradient by columns and direct; (layers-before) the same in the
#      before tree, first;
#   6. (STEPS includes ncu) the kernels of two eager fp32 and bf16 steps at batch 512 and 2048 under ncu
#      (kernels/bench/ncu_durations.py prints one line per launch).
# Usage, from the tree: BEFORE_DIR=.carry/before OUT=$OUT STEPS="torch script" bash kernels/bench/precision_device_run.sh
set -uo pipefail
before=${BEFORE_DIR:-.carry/before}
steps=" ${STEPS:-script} "
out=${OUT:-gpu-out}; mkdir -p "$out"; out=$(cd "$out" && pwd)
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CNN_FASHION_DIR=$PWD/.carry/fashion-mnist CNN_MNIST_DIR=$PWD/.carry/mnist
source kernels/bench/device_run_lib.sh
start=$(date +%s)
nvidia-smi -L; date -u +%FT%TZ
(configure . build-after after && ninja -C build-after -j 12 cnn_mpi gpu_precision gpu_precision_steps gpu_layers gpu_backend >"$out/build-after.log" 2>&1
 echo "after build $?"; grep -E "error" "$out/build-after.log" | head -5) &
if [[ $steps == *" ab "* ]]; then
  before_targets=gpu_layers
  [[ $steps == *" layers-before "* ]] && before_targets+=" gpu_precision"
  (configure "$before" "$before/build-before" before && ninja -C "$before/build-before" -j 4 $before_targets >"$out/build-before.log" 2>&1
   echo "before build $?") &
fi
wait; echo "built at $(($(date +%s) - start)) s"

run 240 precision build-after/tests/gpu_precision --log_level=test_suite
run 240 precision-steps build-after/tests/gpu_precision_steps --log_level=test_suite
grep -E "worst tensor|staged [0-9]|error|failure|No errors|SKIP" "$out/precision.log" | head -30

measure() {  # NAME TREE PRECISIONS
  CNN_MEASURE_PRECISIONS=$3 run 200 "$1" "$2/tests/gpu_layers" --run_test=measure_cifar_epoch_time
  grep -E "^(32|128|512|2048) " "$out/$1.log"
}
ab=${AB_PRECISIONS:-fp32}
if [[ $steps == *" ab "* ]]; then
  measure cifar-before-1 "$before/build-before" "$ab"
  measure cifar-after-1 build-after "$ab"
  measure cifar-before-2 "$before/build-before" "$ab"
  measure cifar-after-2 build-after "$ab"
elif [[ $steps == *" epochs "* ]]; then
  measure cifar-after-1 build-after tf32,bf16
fi
echo "measured at $(($(date +%s) - start)) s"

if [[ $steps == *" torch "* ]]; then
  run 400 torch python3 .carry/anchors/torch_cifar_best.py '[32,128,512,2048]' tf32,bf16
  grep -v "^ *$" "$out/torch.log" | tail -12
fi
if [[ $steps == *" script "* ]]; then
  (cd build-after && PYTHON=python3 run 400 precision-script bash ../tests/gpu_precision_test.sh . ..)
  grep -E "^(ok|FAIL|skip)|mean|passed|failure" "$out/precision-script.log"
fi
if [[ $steps == *" layers-before "* ]]; then
  run 300 layers-before "$before/build-before/tests/gpu_precision" --run_test=measure_layer_products
  grep -v "^Running\|^$" "$out/layers-before.log"
fi
if [[ $steps == *" layers "* ]]; then
  run 300 layers build-after/tests/gpu_precision --run_test=measure_layer_products
  cat "$out/layers.log" | grep -v "^Running\|^$"
fi
if [[ $steps == *" ncu "* ]] && command -v ncu >/dev/null; then
  ncu_cifar_steps build-after "${NCU_PRECISIONS:-fp32,bf16}" "$out" "$out/ncu.txt"
fi
echo "done at $(($(date +%s) - start)) s"
