#!/usr/bin/env bash
# `cnn_mpi predict` on the GPU (label gpu; exit 77 = skipped where no GPU is usable), docs/PREDICT.md:
# for the seed model (the cuda backend's fused conv_relu_pool_fc_softmax op) and for a network of layer
# ops (the fc_softmax op: the last fc layer and the loss), each trained briefly on the GPU:
#   - GPU predictions against CPU ones (threads backend) on the same checkpoint: the same predicted
#     class (except where the CPU's two best probabilities are within 1e-4: a tie either way), and every
#     probability within 1e-4;
#   - the CSV's accuracy is what `eval --device gpu` prints;
#   - 2 ranks (mpirun, sharing the GPU when there is one) write the rows of 1 rank, byte for byte.
# Usage: gpu_predict_test.sh BUILD_DIR SOURCE_DIR   (env: CNN_FASHION_DIR, PYTHON)
source "$2/tests/gpu_script_lib.sh" "$1" "$2"
skip_unless_gpu_runs
data=(--data "$fashion" --test-samples 3000)

# check NAME MODEL...: trains MODEL on the GPU for a short epoch, then predicts on GPU and CPU.
check() {
  local name=$1
  shift
  if ! "$binary" --device gpu "${data[@]}" --train-samples 6000 --batch 100 --epochs 1 --quiet "$@" \
    --out "$work/$name-run" >"$work/$name-train.log" 2>&1; then
    fail "$name: training on the GPU failed: $(tail -3 "$work/$name-train.log")"
    return
  fi
  local ckpt
  ckpt=$(latest "$work/$name-run")
  "$binary" eval --device gpu --checkpoint "$ckpt" "${data[@]}" >"$work/$name-eval.out" 2>&1 ||
    fail "$name: eval on the GPU failed: $(tail -2 "$work/$name-eval.out")"
  "$binary" predict --device gpu --checkpoint "$ckpt" "${data[@]}" --out "$work/$name-gpu.csv" \
    >"$work/$name-gpu.out" 2>&1 || { fail "$name: predict on the GPU failed: $(tail -2 "$work/$name-gpu.out")"; return; }
  "$binary" predict --device cpu --checkpoint "$ckpt" "${data[@]}" --out "$work/$name-cpu.csv" \
    >"$work/$name-cpu.out" 2>&1 || { fail "$name: predict on the CPU failed: $(tail -2 "$work/$name-cpu.out")"; return; }
  if out=$("$python" - "$work/$name-gpu.csv" "$work/$name-cpu.csv" "$work/$name-eval.out" <<'PYEOF' 2>&1
import csv, re, sys
gpu, cpu = (list(csv.reader(open(p)))[1:] for p in sys.argv[1:3])
assert len(gpu) == len(cpu) == 3000, f"{len(gpu)} and {len(cpu)} rows"
worst, ties, correct = 0.0, 0, 0
for g, c in zip(gpu, cpu):
    assert g[:2] == c[:2], f"rows {g[:2]} and {c[:2]}"
    pg, pc = [float(v) for v in g[3:]], [float(v) for v in c[3:]]
    worst = max(worst, max(abs(a - b) for a, b in zip(pg, pc)))
    correct += g[1] == g[2]
    if g[2] != c[2]:
        top = sorted(pc)[-2:]
        assert top[1] - top[0] <= 1e-4, f"row {g[0]}: GPU predicts {g[2]}, CPU {c[2]} ({pc})"
        ties += 1
assert worst <= 1e-4, f"probabilities differ by up to {worst}"
acc = re.search(r"test_acc ([0-9.]+)%", open(sys.argv[3]).read()).group(1)
mine = f"{100.0 * correct / len(gpu):.2f}"
assert mine == acc, f"the GPU CSV's accuracy is {mine}%, eval --device gpu printed {acc}%"
print(f"same classes ({ties} near-ties), probabilities within {worst:.1g}, accuracy {mine}% as eval")
PYEOF
  ); then pass "$name: GPU against CPU: $out"; else fail "$name: $out"; fi
  if mpirun --oversubscribe -np 2 "$binary" predict --device gpu --checkpoint "$ckpt" "${data[@]}" \
    --out "$work/$name-gpu2.csv" >"$work/$name-gpu2.out" 2>&1; then
    cmp -s "$work/$name-gpu.csv" "$work/$name-gpu2.csv" && pass "$name: 2 GPU ranks write the rows of 1" ||
      fail "$name: 2 GPU ranks: $(cmp "$work/$name-gpu.csv" "$work/$name-gpu2.csv" 2>&1 | head -1)"
  else
    fail "$name: predict on 2 GPU ranks failed: $(grep error "$work/$name-gpu2.out" | head -2)"
  fi
}

check seed --filters 8
check layers --model 'conv3x3:8/p1 relu maxpool2 conv3x3:16 relu maxpool2 fc:32 relu fc:10'

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
