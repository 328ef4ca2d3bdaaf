#!/usr/bin/env bash
# Multi-GPU scaling of cnn_mpi against PyTorch DDP (issue 9; issue 10 with GPUS="1 2 4 8"), in one call:
#   for each rank count N in $GPUS (one rank per GPU), 60000 images per epoch split over the ranks,
#   d = 64 and 256, weak scaling (1000 images per rank: global batch 1000 N) and strong scaling (global
#   batch 1000); $EPOCHS epochs, the first excluded (median of the rest); then the DDP anchor
#   (torch_ddp_seed_cnn.py) on the same GPUs. Prints one table: ms/epoch, DDP's ms/epoch and the ratio,
#   parallel efficiency (ms at 1 GPU / (N x ms at N)), and from allreduce.csv the per-step allreduce
#   time, busbw, exposed time and overlap fraction (median over the same epochs).
# Usage: tools/bench-scaling.sh [GPU counts...]      (default: 1 2 4)
# Env: DATA (fashion-mnist dir, default .carry/fashion-mnist), ANCHOR (default .carry/anchors/
#      torch_ddp_seed_cnn.py), EPOCHS (default 5), OVERLAPS (--overlap values, default "auto"; e.g.
#      "on off"), BINARY (default build/cnn_mpi, built if missing), OUT (logs; default bench-out),
#      SKIP_DDP=1 to skip the anchor, EXTRA (more cnn_mpi options), RUN_TIMEOUT (seconds per run, 180),
#      ONLY (run only these configurations, named as their run folders: e.g. "n4-d64-weak n1-d64-weak").
set -uo pipefail
cd "$(dirname "$0")/.."
gpu_counts=("$@")
[[ ${#gpu_counts[@]} -eq 0 ]] && gpu_counts=(1 2 4)
data=${DATA:-.carry/fashion-mnist}
anchor=${ANCHOR:-.carry/anchors/torch_ddp_seed_cnn.py}
epochs=${EPOCHS:-5}
overlaps=${OVERLAPS:-auto}
binary=${BINARY:-build/cnn_mpi}
out=${OUT:-bench-out}
mkdir -p "$out/runs"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
source tools/mpi-env.sh

available=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
most=0
for n in "${gpu_counts[@]}"; do ((n > most)) && most=$n; done
if ((most > available)); then
  echo "bench-scaling: asked for $most GPUs, nvidia-smi lists $available" >&2
  exit 2
fi
visible=$(seq -s, 0 $((most - 1)))
if [[ ! -x $binary ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" >"$out/cmake.log" 2>&1 &&
    cmake --build build -j "$(nproc)" --target cnn_mpi >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
fi
nvidia-smi -L | head -n "$most" | tee "$out/gpus.txt"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ), epochs $epochs (first excluded), overlap modes: $overlaps" | tee "$out/when.txt"

# median of column $2 of CSV $1 over rows of epochs >= 2 (column 1 is the epoch)
median_col() {
  awk -F, -v c="$2" 'NR > 1 && $1 >= 2 { print $c }' "$1" 2>/dev/null | sort -g |
    awk '{ v[++n] = $1 } END { if (n == 0) print "nan"; else print (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'
}

results="$out/cnn_mpi.csv"
echo "ranks,filters,scaling,global_batch,overlap_mode,ms_per_epoch,allreduce_us,busbw_GBps,exposed_us,overlap_fraction,overlap,buckets,path" >"$results"
for n in "${gpu_counts[@]}"; do
  for d in 64 256; do
    for scaling in weak strong; do
      ((n == 1)) && [[ $scaling == strong ]] && continue  # one rank: the same run as weak
      [[ -n ${ONLY:-} && " $ONLY " != *" n$n-d$d-$scaling "* ]] && continue
      batch=$([[ $scaling == weak ]] && echo $((1000 * n)) || echo 1000)
      for mode in $overlaps; do
        # One rank has no allreduce: --overlap changes nothing there, so one mode is enough.
        ((n == 1)) && [[ $mode != "${overlaps%% *}" ]] && continue
        run="$out/runs/n$n-d$d-$scaling-$mode"
        rm -rf "$run"
        CUDA_VISIBLE_DEVICES=$visible timeout "${RUN_TIMEOUT:-180}" mpirun -np "$n" --bind-to none -x NCCL_NVLS_ENABLE -x CUDA_VISIBLE_DEVICES \
          "$binary" --device gpu --data "$data" --filters "$d" --batch "$batch" --epochs "$epochs" \
          --test-samples 1000 --checkpoint-every 0 --overlap "$mode" --quiet --out "$run" ${EXTRA:-} \
          >"$run.log" 2>&1 || { echo "FAILED: n=$n d=$d $scaling $mode: $(tail -2 "$run.log" | xargs)"; continue; }
        ms=$(awk -v s="$(median_col "$run/metrics.csv" 6)" 'BEGIN { printf "%.3f", s * 1000 }')
        if [[ -f $run/allreduce.csv ]]; then
          ar=$(awk -v s="$(median_col "$run/allreduce.csv" 5)" 'BEGIN { printf "%.1f", s * 1e6 }')
          bus=$(median_col "$run/allreduce.csv" 7)
          exposed=$(awk -v s="$(median_col "$run/allreduce.csv" 10)" 'BEGIN { printf "%.1f", s * 1e6 }')
          frac=$(median_col "$run/allreduce.csv" 11)
          ov=$(awk -F, 'NR == 2 { print $8 }' "$run/allreduce.csv")
          buckets=$(awk -F, 'NR == 2 { print $9 }' "$run/allreduce.csv")
          path=$(grep -o 'path=[a-z]*' "$run/scaling.log" | head -1 | cut -d= -f2)
        else
          ar=-; bus=-; exposed=-; frac=-; ov=-; buckets=-; path=-
        fi
        echo "$n,$d,$scaling,$batch,$mode,$ms,$ar,$bus,$exposed,$frac,$ov,$buckets,$path" >>"$results"
      done
    done
  done
done

ddp="$out/ddp.txt"
: >"$ddp"
if [[ -z ${SKIP_DDP:-} && -f $anchor ]] && python3 -c "import torch" 2>/dev/null; then
  CUDA_VISIBLE_DEVICES=$visible timeout 420 python3 "$anchor" 2>&1 | tee "$ddp" | grep -v "^world" | head -5
else
  echo "DDP anchor skipped (SKIP_DDP set, $anchor missing, or no torch)"
fi

echo
echo "cnn_mpi vs PyTorch DDP, ms per epoch of 60000 images (median of epochs 2..$epochs); eff = ms(1 GPU) / (N x ms(N))"
printf "%-5s %-4s %-7s %-6s %-8s %10s %10s %8s %6s %12s %10s %11s %9s %7s %6s\n" ranks d scaling batch overlap \
  ms/epoch DDP_ms xDDP eff allreduce_us busbw_GBps exposed_us hidden buckets path
awk -F, -v ddp="$ddp" '
  BEGIN {
    while ((getline line < ddp) > 0) {
      if (line !~ /^world=/) continue
      split(line, f, /[ =]+/)  # world W filters D batch_per_rank B global_batch G ms_per_epoch X
      w = f[2]; d = f[4]; b = f[6]; g = f[8]; x = f[10]
      if (b == 1000) D[w, d, "weak"] = x
      if (g == 1000 || (w == 1 && b == 1000)) D[w, d, "strong"] = x
    }
  }
  NR == 1 { next }
  { rows[NR] = $0; if ($1 == 1) one[$2] = $6 }
  END {
    for (i = 2; i <= NR; ++i) {
      split(rows[i], r, ",")
      dd = ((r[1], r[2], r[3]) in D) ? D[r[1], r[2], r[3]] : ""
      ratio = (dd != "" && r[6] > 0) ? sprintf("%.1f", dd / r[6]) : "-"
      eff = ((r[2] in one) && r[6] > 0) ? sprintf("%.0f%%", 100 * one[r[2]] / (r[1] * r[6])) : "-"
      printf "%-5s %-4s %-7s %-6s %-8s %10s %10s %8s %6s %12s %10s %11s %9s %7s %6s\n", r[1], r[2], r[3], r[4], r[5], r[6],
        (dd == "" ? "-" : dd), ratio, eff, r[7], r[8], r[9], r[10], r[12], r[13]
    }
  }' "$results" | tee "$out/table.txt"
echo "targets: every row xDDP >= 10; weak eff at 4 GPUs >= 80% (d=256), >= 60% (d=64); at 8 GPUs >= 70% (d=256)"
