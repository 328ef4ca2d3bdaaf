#!/usr/bin/env bash
# --precision tf32 and bf16 through the real binary (label gpu; exit 77 = skipped where no GPU is usable):
#   1. the settings block names the precision and each op's kernels per pass (mma.<precision> for the
#      conv and fc products; fma.fp32 for the last fc layer's forward and input gradient, run with the
#      loss), and the checkpoint's /config stores it; the cifar preset's conv2 pools in
#      its store, a conv + relu + maxpool2 inside a block does not and says so;
#   2. determinism: two identical runs give bitwise identical checkpoints, and a run stopped mid-epoch
#      (CNN_TEST_STOP_AFTER_STEPS) and resumed ends bitwise equal to an uninterrupted one, with CUDA
#      graphs, the deferred non-finite check and --overlap on (2 ranks sharing the GPU) alike;
#   3. resuming in another precision is allowed and said; a CPU backend refuses tf32 and bf16 (exit 2);
#   4. 2 ranks (sharing one GPU, --allreduce mpi; NCCL with 2+ GPUs) against 1, same global batch, 20
#      SGD steps: final weights within tests/ckpt_compare.py's rel bound of the precision (5e-3 tf32,
#      3e-2 bf16). (With Adam the bound does not hold in any precision: a gradient near zero whose sign
#      differs by rounding moves its weight by a whole lr per step, 0.15 of the largest weight after 20
#      steps in tf32 on nvidia-h100-x1.) And the 2-rank run with Adam, stopped and resumed, bitwise;
#   5. fidelity: the cifar preset, 3 epochs of Fashion-MNIST (Adam 1e-3), mean test accuracy over seeds
#      1, 2, 3 within 0.3 percentage points of fp32's, at batch 32 (mma.sync products) and at batch 128
#      (where, on an sm_90a build and GPU, the warpgroup products and the TMA boxes run);
#   6. compute-sanitizer memcheck (eager and through the CUDA graph) and racecheck clean on a short
#      cifar run in each precision at batch 100, whose conv2 input gradient takes the warpgroup product
#      over TMA boxes on an sm_90a build and GPU (1 also checks that the settings name it there).
# Usage: gpu_precision_test.sh BUILD_DIR SOURCE_DIR   (env: CNN_FASHION_DIR, PYTHON)
source "$2/tests/gpu_script_lib.sh" "$1" "$2"
skip_unless_gpu_runs h5py
major=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | cut -d. -f1)
if [[ ${major:-0} -lt 8 ]]; then echo "SKIP: tf32 and bf16 need compute capability 8.0 (GPU 0 has $major)"; exit 77; fi
final_accuracy() { awk -F, 'NR > 1 { acc = $4 } END { printf "%.4f", 100 * acc }' "$1/metrics.csv"; }
declare -A bound=([tf32]=5e-3 [bf16]=3e-2)

small=(--device gpu --data "$fashion" --model cifar --train-samples 2000 --test-samples 500 --batch 100 --epochs 1
       --optimizer adam --lr 0.001)
for p in tf32 bf16; do
  # 1. Settings and checkpoint.
  if "$binary" "${small[@]}" --precision "$p" --out "$work/$p-a" >"$work/$p-a.log" 2>&1; then
    # conv2, conv3 and fc1 forward on mma.sync at this batch; fc2 runs with the loss (fc_softmax), its
    # weight gradient on mma.sync.
    if grep -q "^  precision: $p$" "$work/$p-a.log" && grep -q "kernels ($p," "$work/$p-a.log" &&
       [[ $(grep -c "forward mma.$p" "$work/$p-a.log") -ge 3 ]] &&
       grep -q "fc_softmax: forward, loss and input gradient in one kernel, fma.fp32 (a warp per sample); weight gradient mma.$p" "$work/$p-a.log"; then
      pass "$p: settings name the precision and mma.$p kernels: $(grep -m1 "op 1 " "$work/$p-a.log" | xargs)"
    else
      fail "$p: settings lack the precision or the kernels: $(grep -A8 'kernels' "$work/$p-a.log" | xargs)"
    fi
    stored=$("$python" -c "import h5py, sys; v = h5py.File(sys.argv[1])['config'].attrs['precision']; print(v.decode() if isinstance(v, bytes) else v)" "$(latest "$work/$p-a")" 2>&1)
    [[ $stored == "$p" ]] && pass "$p: the checkpoint stores precision $stored" || fail "$p: checkpoint precision '$stored'"
    # The 2x2 max-pool runs in the store of the conv before it in the backend's sequence of ops: the
    # cifar preset's conv2 says so; a conv + relu + maxpool2 inside a block runs its plain forward, and
    # its settings line must not claim the pool.
    # On a compute capability 9.0 GPU with a build for sm_90a, conv2's input gradient (200 boxes of
    # 13x9 pixels at batch 100: Fashion-MNIST's 28x28 make its input 13x13) takes the warpgroup product
    # over TMA boxes; elsewhere no product does.
    # The build's sm_90a code shows in its nvcc flags (Makefiles or Ninja); the CMake cache names the
    # architectures only where they were given (the default list in CMakeLists.txt is not cached).
    wgmma_expected=0
    if [[ $(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1) == 9.0 ]] &&
       grep -qs 'code=\[[^]]*sm_90a' "$1/kernels/CMakeFiles/cnn_cuda.dir/flags.make" "$1/build.ninja"; then
      wgmma_expected=1
    fi
    if [[ $wgmma_expected -eq 1 ]]; then
      if grep -q "input gradient wgmma.$p 128x32, TMA boxes of 13x9x1 pixels" "$work/$p-a.log"; then
        pass "$p: conv2's input gradient takes the warpgroup product over TMA boxes (sm_90a)"
      else
        fail "$p: sm_90a build on a 9.0 GPU, but conv2's input gradient is not the TMA one: $(grep -m2 -o 'input gradient [^;]*' "$work/$p-a.log" | xargs)"
      fi
    elif grep -q "wgmma" "$work/$p-a.log"; then
      fail "$p: a warpgroup product without an sm_90a build on a 9.0 GPU: $(grep -m1 wgmma "$work/$p-a.log" | xargs)"
    else
      pass "$p: no warpgroup product (not an sm_90a build on a 9.0 GPU)"
    fi
    if grep -q "with the 2x2 max-pool in its store" "$work/$p-a.log"; then
      pass "$p: the cifar preset's conv2 pools in its store"
    else
      fail "$p: no conv of the cifar preset pools in its store: $(grep 'op ' "$work/$p-a.log" | xargs)"
    fi
    block=(--device gpu --data "$fashion" --model "conv3x3:8/p1 relu res[conv3x3:16/p1 relu maxpool2] fc:10"
           --train-samples 500 --test-samples 100 --batch 100 --epochs 1 --precision "$p")
    "$binary" "${block[@]}" --out "$work/$p-block" >"$work/$p-block.log" 2>&1
    code=$?
    if [[ $code -ne 0 ]]; then
      fail "$p: a block with a max-pool inside exited $code: $(tail -3 "$work/$p-block.log" | xargs)"
    elif grep -q "max-pool in its store" "$work/$p-block.log"; then
      fail "$p: a block's inner conv claims the max-pool: $(grep 'op 1 ' "$work/$p-block.log" | xargs)"
    else
      pass "$p: a block's inner conv runs its plain forward: $(grep -m1 'op 1 ' "$work/$p-block.log" | cut -c1-120)"
    fi
  else
    fail "$p run exited $?: $(tail -3 "$work/$p-a.log" | xargs)"
    continue
  fi
  # 2. Determinism: a rerun, and a stop at step 13 of 20 then a resume.
  "$binary" "${small[@]}" --precision "$p" --out "$work/$p-b" >/dev/null 2>&1 || fail "$p rerun failed"
  if out=$("$python" "$compare" exact "$(latest "$work/$p-a")" "$(latest "$work/$p-b")" 2>&1); then
    pass "$p: two identical runs: $out"
  else
    fail "$p: two identical runs differ: $out"
  fi
  CNN_TEST_STOP_AFTER_STEPS=13 "$binary" "${small[@]}" --precision "$p" --out "$work/$p-stopped" >/dev/null 2>&1
  code=$?
  "$binary" "${small[@]}" --precision "$p" --out "$work/$p-stopped" --resume auto >/dev/null 2>&1 || fail "$p resume failed"
  if [[ $code -ne 5 ]]; then
    fail "$p: a stop after 13 steps exited $code, expected 5"
  elif out=$("$python" "$compare" exact "$(latest "$work/$p-a")" "$(latest "$work/$p-stopped")" 2>&1); then
    pass "$p: stop at step 13 + resume vs uninterrupted: $out"
  else
    fail "$p: resume differs from the uninterrupted run: $out"
  fi
  # 4. Two ranks against one, and the 2-rank run stopped and resumed, with the allreduce under the backward.
  if [[ $gpus -ge 2 ]]; then two=(--allreduce nccl); else two=(--allreduce mpi); fi
  sgd=("${small[@]}" --optimizer sgd --lr 0.05 --precision "$p")
  if mpirun -np 2 --oversubscribe -x NCCL_NVLS_ENABLE "$binary" "${sgd[@]}" "${two[@]}" --overlap on \
       --out "$work/$p-two-sgd" >"$work/$p-two-sgd.log" 2>&1 &&
     "$binary" "${sgd[@]}" --out "$work/$p-one-sgd" >"$work/$p-one-sgd.log" 2>&1; then
    if out=$("$python" "$compare" "rel=${bound[$p]}" "$(latest "$work/$p-two-sgd")" "$(latest "$work/$p-one-sgd")" 2>&1); then
      pass "$p: 2 ranks (${two[*]}) vs 1 after 20 SGD steps: $out"
    else
      fail "$p: 2 ranks vs 1 (SGD): $out"
    fi
  else
    fail "$p: 2-rank or 1-rank SGD run failed: $(tail -3 "$work/$p-two-sgd.log" | xargs)"
  fi
  if mpirun -np 2 --oversubscribe -x NCCL_NVLS_ENABLE "$binary" "${small[@]}" --precision "$p" "${two[@]}" \
       --overlap on --out "$work/$p-two" >"$work/$p-two.log" 2>&1; then
    CNN_TEST_STOP_AFTER_STEPS=13 mpirun -np 2 --oversubscribe -x NCCL_NVLS_ENABLE -x CNN_TEST_STOP_AFTER_STEPS \
      "$binary" "${small[@]}" --precision "$p" "${two[@]}" --overlap on --out "$work/$p-two-stopped" >/dev/null 2>&1
    mpirun -np 2 --oversubscribe -x NCCL_NVLS_ENABLE "$binary" "${small[@]}" --precision "$p" "${two[@]}" \
      --overlap on --out "$work/$p-two-stopped" --resume auto >/dev/null 2>&1 || fail "$p 2-rank resume failed"
    if out=$("$python" "$compare" exact "$(latest "$work/$p-two")" "$(latest "$work/$p-two-stopped")" 2>&1); then
      pass "$p: 2 ranks, stop at 13 + resume vs uninterrupted: $out"
    else
      fail "$p: 2-rank resume differs: $out"
    fi
  else
    fail "$p: 2-rank run failed: $(tail -3 "$work/$p-two.log" | xargs)"
  fi
done

# 3. Another precision on resume: allowed and said. A CPU backend refuses tf32.
CNN_TEST_STOP_AFTER_STEPS=13 "$binary" "${small[@]}" --precision bf16 --out "$work/switch" >/dev/null 2>&1
if "$binary" "${small[@]}" --precision tf32 --out "$work/switch" --resume auto >"$work/switch.log" 2>&1 &&
   grep -q "resume: precision bf16 -> tf32" "$work/switch.log"; then
  pass "resume in another precision: $(grep -m1 'resume: precision' "$work/switch.log")"
else
  fail "resume bf16 -> tf32: $(tail -3 "$work/switch.log" | xargs)"
fi
"$binary" --device cpu --data "$fashion" --precision tf32 --out "$work/cpu" >"$work/cpu.log" 2>&1
code=$?
if [[ $code -eq 2 && $(wc -l <"$work/cpu.log") -eq 1 ]]; then
  pass "cpu refuses tf32 with exit 2: $(cat "$work/cpu.log")"
else
  fail "cpu with tf32: exit $code, $(head -3 "$work/cpu.log" | xargs)"
fi

# 5. Fidelity: mean test accuracy over seeds 1-3 after 3 epochs, each precision against fp32, at two
# batches: 32 keeps mma.sync's plans on this model; at 128 conv2's input gradient takes the warpgroup
# product over TMA boxes on sm_90a (its 13x9x1 boxes make a wave there).
for batch in 32 128; do
  declare -A mean=()
  for p in fp32 tf32 bf16; do
    sum=0
    accs=""
    for seed in 1 2 3; do
      if ! "$binary" --device gpu --data "$fashion" --model cifar --optimizer adam --lr 0.001 --batch "$batch" \
           --epochs 3 --seed "$seed" --precision "$p" --checkpoint-every 0 --out "$work/acc-$batch-$p-$seed" \
           --quiet >/dev/null 2>&1; then
        fail "accuracy run batch $batch $p seed $seed failed"
        continue
      fi
      acc=$(final_accuracy "$work/acc-$batch-$p-$seed")
      accs+=" $acc"
      sum=$(awk -v s="$sum" -v a="$acc" 'BEGIN { print s + a }')
    done
    mean[$p]=$(awk -v s="$sum" 'BEGIN { printf "%.3f", s / 3 }')
    echo "     batch $batch, $p: test accuracy after 3 epochs, seeds 1-3:$accs (mean ${mean[$p]}%)"
  done
  for p in tf32 bf16; do
    gap=$(awk -v a="${mean[$p]}" -v b="${mean[fp32]}" 'BEGIN { printf "%.3f", a - b }')
    if awk -v g="$gap" 'BEGIN { exit !(g >= -0.3) }'; then
      pass "batch $batch: $p mean accuracy ${mean[$p]}% vs fp32 ${mean[fp32]}% (gap $gap pp, bound -0.3)"
    else
      fail "batch $batch: $p mean accuracy ${mean[$p]}% is more than 0.3 pp below fp32's ${mean[fp32]}% ($gap pp)"
    fi
  done
done

# 6. compute-sanitizer on a short run in each precision (2 steps of 100; memcheck eager and through
#    the captured graph, racecheck eager), where the warpgroup and TMA products run on sm_90a.
if command -v compute-sanitizer >/dev/null; then
  tiny=(--device gpu --data "$fashion" --model cifar --train-samples 200 --test-samples 100 --batch 100 --epochs 1
        --optimizer adam --lr 0.001 --quiet)
  for p in tf32 bf16; do
    for check in memcheck:1 memcheck:0 racecheck:0; do
      tool=${check%:*} graphs=${check#*:}
      what="compute-sanitizer $tool, $p (graphs=$graphs)"
      if CNN_CUDA_GRAPHS=$graphs compute-sanitizer --tool "$tool" --error-exitcode 99 "$binary" "${tiny[@]}" \
          --precision "$p" --out "$work/san-$p-$tool-$graphs" >"$work/san.log" 2>&1; then
        pass "$what: $(grep -E 'SUMMARY' "$work/san.log" | tail -1 | xargs)"
      else
        fail "$what: $(grep -m3 -E 'ERROR|Invalid|Race|Program hit|error' "$work/san.log" | xargs)"
      fi
    done
  done
else
  echo "skip - compute-sanitizer not installed"
fi

if [[ $failures -ne 0 ]]; then echo "gpu_precision_test: $failures failure(s)"; exit 1; fi
echo "gpu_precision_test: passed"
