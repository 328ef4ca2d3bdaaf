#!/usr/bin/env bash
# One device call (nvidia-h100-x2 or nvidia-h200-x2) that checks a restructuring for speed: builds this
# tree ("after") and BEFORE_DIR (an export of the earlier commit inside the checkout, so that it
# travels: `mkdir -p .carry/before && git archive REV | tar -x -C .carry/before`) in parallel, then
# times the seed and cifar rows through the trainer itself, before and after alternated ROUNDS times
# (default 3) on the same warm machine. Each row is the median epoch_seconds of metrics.csv over
# epochs 2..E (the first, with graph capture and warm-up, excluded):
#   seed, 1 GPU:   global batch 1000 and 100, d = 64 and 256 (Fashion-MNIST, SGD)
#   seed, 2 GPUs:  d = 64 and 256, weak (1000 per rank, global 2000) and strong (global 1000), --overlap auto
#   cifar, 1 GPU:  batch 32, 128, 512, 2048 (50000 random 3x32x32 CIFAR-10-format images, Adam)
# Then, when STEPS names them, the GPU tests on the after tree (tools/gpu-validate.sh).
# Usage, from the tree: BEFORE_DIR=.carry/before OUT=$OUT [ROUNDS=3] [STEPS="rows tests"] bash kernels/bench/ab_device_run.sh
set -uo pipefail
before=${BEFORE_DIR:-.carry/before}
out=${OUT:-gpu-out}; mkdir -p "$out/runs"
steps=" ${STEPS:-rows tests} "
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source kernels/bench/device_run_lib.sh
start=$(date +%s)
nvidia-smi -L; date -u +%FT%TZ
gpus=$(nvidia-smi -L | grep -c '^GPU')
jobs=$(nproc)
(configure . build after && ninja -C build -j "$((jobs * 2 / 3))" >"$out/build-after.log" 2>&1
 echo "after build $? at $(($(date +%s) - start)) s") &
(configure "$before" "$before/build-before" before &&
 ninja -C "$before/build-before" -j "$((jobs / 3))" cnn_mpi >"$out/build-before.log" 2>&1
 echo "before build $? at $(($(date +%s) - start)) s") &
# 50000 + 10000 random CIFAR-10 binary records (label byte < 10, then 3072 pixel bytes).
python3 - <<'PY' &
import os, random
d = ".carry/cifar-random"; os.makedirs(d, exist_ok=True)
rng = random.Random(2024)
def write(name, n):
    with open(os.path.join(d, name), "wb") as f:
        for _ in range(n):
            f.write(bytes([rng.randrange(10)]) + os.urandom(3072))
for b in range(1, 6): write("data_batch_%d.bin" % b, 10000)
write("test_batch.bin", 10000)
PY
wait; echo "built at $(($(date +%s) - start)) s"
grep -E "error|FAILED" "$out/build-after.log" "$out/build-before.log" | head -20

# row NAME TREE RANKS ARGS...: trains, prints "NAME ms" (median epoch_seconds over epochs >= 2).
row() {
  local name=$1 tree=$2 ranks=$3
  shift 3
  local dir=$out/runs/$name-$tree-$round
  rm -rf "$dir"
  local binary=build/cnn_mpi; [[ $tree == before ]] && binary=$before/build-before/cnn_mpi
  local launch=(); ((ranks > 1)) && launch=(mpirun -np "$ranks" --bind-to none -x NCCL_NVLS_ENABLE)
  timeout 180 "${launch[@]}" "$binary" --device gpu --out "$dir" --quiet --checkpoint-every 0 "$@" >"$dir.log" 2>&1 ||
    { echo "$name $tree: exit $? ($(tail -1 "$dir.log"))"; return; }
  awk -F, 'NR > 1 && $1 >= 2 { print $6 }' "$dir/metrics.csv" | sort -g |
    awk -v n="$name" -v t="$tree" -v r="$round" '{ v[++k] = $1 } END { m = (k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2; printf "%-22s %-6s round %d %9.2f ms\n", n, t, r, 1000 * m }'
}
if [[ $steps == *" rows "* ]]; then
  fashion=(--dataset fashion --data .carry/fashion-mnist --model seed --lr 0.1)
  cifar=(--dataset cifar10 --data .carry/cifar-random --model cifar --optimizer adam --lr 0.001 --test-samples 1000)
  for round in $(seq 1 "${ROUNDS:-3}"); do
    for tree in before after; do
      for d in 64 256; do
        for b in 1000 100; do row "seed-b$b-d$d" "$tree" 1 "${fashion[@]}" --filters "$d" --batch "$b" --epochs 6; done
      done
      if ((gpus >= 2)); then
        for d in 64 256; do
          row "seed-2gpu-weak-d$d" "$tree" 2 "${fashion[@]}" --filters "$d" --batch 2000 --epochs 6
          row "seed-2gpu-strong-d$d" "$tree" 2 "${fashion[@]}" --filters "$d" --batch 1000 --epochs 6
        done
      fi
      for b in 32 128 512 2048; do row "cifar-b$b" "$tree" 1 "${cifar[@]}" --batch "$b" --epochs 4; done
    done
  done | tee "$out/rows.txt"
  echo "rows at $(($(date +%s) - start)) s"
fi
if [[ $steps == *" tests "* ]]; then
  run 420 validate env SKIP_PYTORCH=1 BUILD_DIR=build bash tools/gpu-validate.sh .carry
  grep -E "^(ok|FAIL|SKIP|skip|PASS)|tests passed|errors" "$out/validate.log" | tail -30
fi
echo "total: $(($(date +%s) - start)) s"
