#!/usr/bin/env bash
# One device call that builds this tree for sm_90a and runs every GPU test (ctest -L gpu), printing
# compact results only: CTest's summary and, for the Boost.Test GPU programs, each test case with its
# time (so that a skipped case shows). Usage: bash kernels/bench/gpu_tests_device_run.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CNN_FASHION_DIR=$PWD/.carry/fashion-mnist CNN_MNIST_DIR=$PWD/.carry/mnist
nvidia-smi -L; date -u +%FT%TZ
start=$(date +%s)
log=$(mktemp)
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a >"$log" 2>&1 &&
  ninja -C build-gpu -j "$(nproc)" >>"$log" 2>&1)
echo "build $? at $(($(date +%s) - start)) s"; grep -E "error:" "$log" | head -10
(cd build-gpu && timeout 480 ctest -L gpu --timeout 400) 2>&1 | grep -E "Test +#|tests passed|FAILED|Failed" | sed -E 's/ +/ /g'
for t in gpu_backend gpu_backend_kernels gpu_backend_randomness gpu_layers gpu_layer_networks gpu_layer_determinism \
         gpu_bn gpu_precision gpu_precision_steps gpu_staged_handover gpu_staged_backward_handover gpu_mma_tiles; do
  echo "== $t"
  timeout 200 "build-gpu/tests/$t" --log_level=test_suite 2>&1 |
    grep -E "Leaving test case|is skipped|error|No errors|failure" |
    sed -E 's/.*Leaving test case "([^"]*)".*; testing time: (.*)/  \1 \2/; s/.*Test case "([^"]*)" is skipped because (.*)/  \1 skipped (\2)/'
done
grep -E "^(ok|FAIL|not ok)" build-gpu/Testing/Temporary/LastTest.log | grep -v "^ok" | head -20
echo "done at $(($(date +%s) - start)) s"
rm -f "$log"
