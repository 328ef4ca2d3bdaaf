#!/usr/bin/env bash
# CPU speed of this tree against an earlier build, for a change that must not slow anything down:
# the rows below run before, after, before, after, ... ROUNDS times (default 5) and compare USER CPU
# seconds (/usr/bin/time %U), not wall time: this 2-core VM's wall times swing up to 2.5x under load,
# while the work a process does stays put. Prints one line per run and the median per row and tree.
#   seed  seq      batch 100, d 32     (the reference backend, one thread)
#   seed  threads  batch 1000, d 64, batch 100, d 64 and batch 1000, d 256   (2 threads)
#   cifar threads  batch 128          (the cifar preset on Fashion-MNIST)
#   cifar seq      batch 128
# Each run: 1 epoch over SAMPLES (default 6000) Fashion-MNIST images, 1000 test images.
# Usage: BEFORE=path/to/before/cnn_mpi [AFTER=build/cnn_mpi] [SAMPLES=N] [ROUNDS=N] [ONLY=regex] tools/ab-cpu.sh
# (ONLY: run the rows whose name matches, e.g. ONLY=seed-threads)
set -euo pipefail
cd "$(dirname "$0")/.."
before=${BEFORE:?BEFORE=the earlier build of cnn_mpi}
after=${AFTER:-build/cnn_mpi}
samples=${SAMPLES:-6000}
rounds=${ROUNDS:-5}
data=${DATA:-/usr/share/datasets/fashion-mnist}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rows=("seed-seq-b100-d32:--model seed --backend seq --batch 100 --filters 32"
      "seed-threads-b1000-d64:--model seed --backend threads --batch 1000 --filters 64"
      "seed-threads-b100-d64:--model seed --backend threads --batch 100 --filters 64"
      "seed-threads-b1000-d256:--model seed --backend threads --batch 1000 --filters 256"
      "cifar-threads-b128:--model cifar --backend threads --batch 128 --optimizer adam --lr 0.001"
      "cifar-seq-b128:--model cifar --backend seq --batch 128 --optimizer adam --lr 0.001")
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "# before: $before; after: $after; $samples images, 1 epoch, $rounds rounds alternated"
selected=()
for row in "${rows[@]}"; do [[ ${row%%:*} =~ ${ONLY:-.} ]] && selected+=("$row"); done
rows=("${selected[@]}")
for round in $(seq 1 "$rounds"); do
  for row in "${rows[@]}"; do
    name=${row%%:*}
    read -ra args <<<"${row#*:}"
    for tree in before after; do
      binary=$before; [[ $tree == after ]] && binary=$after
      rm -rf "$work/run"
      /usr/bin/time -f '%U %e' -o "$work/time" "$binary" "${args[@]}" --data "$data" --epochs 1 \
        --train-samples "$samples" --test-samples 1000 --out "$work/run" --quiet >"$work/log" 2>&1 ||
        { cat "$work/log"; exit 1; }
      read -r user wall <"$work/time"
      echo "$name $tree $round $user $wall" | tee -a "$work/all"
    done
  done
done
echo
echo "| row | before user s (median) | after user s (median) | after/before |"
echo "| --- | ---: | ---: | ---: |"
for row in "${rows[@]}"; do
  name=${row%%:*}
  median() { awk -v n="$name" -v t="$1" '$1 == n && $2 == t { print $4 }' "$work/all" | sort -g |
    awk '{ v[++k] = $1 } END { printf "%.2f", (k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2 }'; }
  b=$(median before); a=$(median after)
  echo "| $name | $b | $a | $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }') |"
done
