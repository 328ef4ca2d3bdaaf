#!/usr/bin/env bash
# Multi-GPU scaling of cnn_mpi against PyTorch DDP, in one call. Two modes (MODEL):
# seed (default; issue 9, issue 10 with GPUS="1 2 4 8"):
#   for each rank count N in $GPUS (one rank per GPU), 60000 images per epoch split over the ranks,
#   d = 64 and 256, weak scaling (1000 images per rank: global batch 1000 N) and strong scaling (global
#   batch 1000); $EPOCHS epochs, the first excluded (median of the rest); then the DDP anchor
#   (torch_ddp_seed_cnn.py) on the same GPUs. Prints one table: ms/epoch, DDP's ms/epoch and the ratio,
#   parallel efficiency (ms at 1 GPU / (N x ms at N)), and from allreduce.csv the per-step allreduce
#   time, busbw, exposed time and overlap fraction (median over the same epochs).
# cifar (issue 28): the cifar preset in $PRECISION (bf16 or tf32, default bf16) with Adam (lr 1e-3),
#   weak scaling only: $BATCH_PER_RANK images per rank (512; global batch 512 N), an epoch of 50000
#   CIFAR-10-format images split over the ranks (the last step takes the rest); then
#   tools/torch_cifar_ddp.py (the same model under DDP, torch.compile, channels_last, the same
#   precision, the same batch per rank and epoch) on the same GPUs. Without DATA, a random data set
#   (50000 training and 1000 test images, seeded) is made once in $OUT/cifar-random. The table has the
#   seed mode's columns less d and scaling, and DDP's own efficiency beside cnn_mpi's. Efficiency is the
#   seed mode's, ms(1 GPU) / (N x ms(N)): the epoch is the same at every N, so this is images/s per GPU
#   at N over images/s at 1 GPU (100% = N GPUs take 1/N of the time).
# Usage: tools/bench-scaling.sh [GPU counts...]      (default: 1 2 4)
#        MODEL=cifar PRECISION=bf16 tools/bench-scaling.sh 1 2 4
# Env: MODEL (seed or cifar), DATA (seed: fashion-mnist dir, default .carry/fashion-mnist; cifar: a
#      CIFAR-10 binary dir, default $OUT/cifar-random, made if missing), ANCHOR (seed: default
#      .carry/anchors/torch_ddp_seed_cnn.py; cifar: tools/torch_cifar_ddp.py), EPOCHS (default 5),
#      OVERLAPS (--overlap values, default "auto"; e.g. "on off"), BINARY (default build/cnn_mpi, built
#      if missing), OUT (logs; default bench-out), SKIP_DDP=1 to skip the anchor, EXTRA (more cnn_mpi
#      options), RUN_TIMEOUT (seconds per run, 180), DDP_TIMEOUT (seconds for the anchor, 420),
#      ONLY (run only these configurations, named as their run folders: e.g. "n4-d64-weak n1-d64-weak";
#      cifar: "n4-cifar n1-cifar", every overlap mode), PRECISION and BATCH_PER_RANK (cifar only),
#      DATA_ONLY=1 (cifar: make the random data set and stop), TABLE_ONLY=1 (print the table again
#      from the results already in $OUT, with the same MODEL and EPOCHS; no GPU needed).
# Output, in $OUT: seed: cnn_mpi.csv, ddp.txt, table.txt; cifar: cnn_mpi-cifar.csv (and .what: what
#      ran), ddp-cifar.txt, table-cifar.txt; both: gpus.txt, when.txt, runs/NAME/ (each run's
#      metrics.csv, allreduce.csv ...) and runs/NAME.log.
set -uo pipefail
cd "$(dirname "$0")/.."
gpu_counts=("$@")
[[ ${#gpu_counts[@]} -eq 0 ]] && gpu_counts=(1 2 4)
model=${MODEL:-seed}
epochs=${EPOCHS:-5}
overlaps=${OVERLAPS:-auto}
binary=${BINARY:-build/cnn_mpi}
out=${OUT:-bench-out}
case $model in
  seed)
    if [[ -n ${DATA_ONLY:-} ]]; then
      echo "bench-scaling: DATA_ONLY makes the cifar mode's data: give MODEL=cifar" >&2
      exit 2
    fi
    [[ -n ${PRECISION:-}${BATCH_PER_RANK:-} ]] &&
      echo "bench-scaling: PRECISION and BATCH_PER_RANK apply to MODEL=cifar; the seed mode ignores them" >&2
    data=${DATA:-.carry/fashion-mnist}
    anchor=${ANCHOR:-.carry/anchors/torch_ddp_seed_cnn.py}
    results="$out/cnn_mpi.csv" ddp="$out/ddp.txt" table="$out/table.txt" ;;
  cifar)
    precision=${PRECISION:-bf16}
    per_rank=${BATCH_PER_RANK:-512}
    if [[ $precision != bf16 && $precision != tf32 ]]; then
      echo "bench-scaling: PRECISION must be bf16 or tf32 (the DDP anchor's modes), not '$precision'" >&2
      exit 2
    fi
    if [[ ! $per_rank =~ ^[1-9][0-9]*$ ]]; then
      echo "bench-scaling: BATCH_PER_RANK must be a positive integer, not '$per_rank'" >&2
      exit 2
    fi
    data=${DATA:-$out/cifar-random}
    anchor=${ANCHOR:-tools/torch_cifar_ddp.py}
    results="$out/cnn_mpi-cifar.csv" ddp="$out/ddp-cifar.txt" table="$out/table-cifar.txt" ;;
  *)
    echo "bench-scaling: MODEL must be seed or cifar, not '$model'" >&2
    exit 2 ;;
esac
for n in "${gpu_counts[@]}"; do
  if [[ ! $n =~ ^[1-9][0-9]*$ ]]; then
    echo "bench-scaling: GPU counts must be positive integers, not '$n'" >&2
    exit 2
  fi
done
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
source tools/mpi-env.sh

# make_cifar_data DIR: 50000 training records (data_batch_1..5.bin) and 1000 test records
# (test_batch.bin) of CIFAR-10 binary, a label byte below 10 then 3072 random pixel bytes, the same
# bytes on every machine (seeded). Written into DIR.partial and renamed whole, so DIR is complete
# whenever it exists.
make_cifar_data() {
  [[ -d $1 ]] && return 0
  python3 - "$1" <<'PY'
import os, random, shutil, sys
final = sys.argv[1]; part = final + ".partial"
shutil.rmtree(part, ignore_errors=True); os.makedirs(part)
rng = random.Random(28)
def write(name, records):
    with open(os.path.join(part, name), "wb") as f:
        for _ in range(records): f.write(bytes([rng.randrange(10)]) + rng.randbytes(3072))
for batch in range(1, 6): write("data_batch_%d.bin" % batch, 10000)
write("test_batch.bin", 1000)
os.rename(part, final)
PY
}

# median of column $2 of CSV $1 over rows of epochs >= 2 (column 1 is the epoch)
median_col() {
  awk -F, -v c="$2" 'NR > 1 && $1 >= 2 { print $c }' "$1" 2>/dev/null | sort -g |
    awk '{ v[++n] = $1 } END { if (n == 0) print "nan"; else print (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'
}

# train RUN RANKS ARGS...: cnn_mpi on the first RANKS GPUs, $EPOCHS epochs, into folder RUN (output in
# RUN.log), EXTRA last; fails when cnn_mpi fails or outlives RUN_TIMEOUT.
train() {
  local run=$1 ranks=$2
  shift 2
  rm -rf "$run"
  CUDA_VISIBLE_DEVICES=$visible timeout "${RUN_TIMEOUT:-180}" mpirun -np "$ranks" --bind-to none -x NCCL_NVLS_ENABLE -x CUDA_VISIBLE_DEVICES \
    "$binary" --device gpu "$@" --epochs "$epochs" --test-samples 1000 --checkpoint-every 0 --quiet --out "$run" ${EXTRA:-} \
    >"$run.log" 2>&1
}

# run_fields RUN: a finished run's "ms_per_epoch,allreduce_us,busbw_GBps,exposed_us,overlap_fraction,
# overlap,buckets,path": medians over epochs >= 2 of metrics.csv and allreduce.csv (all "-" past
# ms_per_epoch when there was no allreduce), the path the advisor chose from scaling.log.
run_fields() {
  local run=$1 ms ar bus exposed frac ov buckets path
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
  echo "$ms,$ar,$bus,$exposed,$frac,$ov,$buckets,$path"
}

# run_anchor ARGS...: the DDP anchor on the same GPUs, its output in $ddp (header lines echoed).
run_anchor() {
  : >"$ddp"
  if [[ -z ${SKIP_DDP:-} && -f $anchor ]] && python3 -c "import torch" 2>/dev/null; then
    CUDA_VISIBLE_DEVICES=$visible timeout "${DDP_TIMEOUT:-420}" python3 "$anchor" "$@" 2>&1 | tee "$ddp" | grep -v "^world" | head -5
  else
    echo "DDP anchor skipped (SKIP_DDP set, $anchor missing, or no torch)"
  fi
}

# print_seed_table: the seed mode's table from $results and $ddp.
print_seed_table() {
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
    }' "$results" | tee "$table"
  echo "targets: every row xDDP >= 10; weak eff at 4 GPUs >= 80% (d=256), >= 60% (d=64); at 8 GPUs >= 70% (d=256)"
}

# print_cifar_table: the cifar mode's table from $results and $ddp. Both sides train the same epoch at
# every N, so eff = ms(1) / (N x ms(N)) is images/s per GPU at N over images/s at 1 GPU, as in the seed
# mode; DDP_eff is the same ratio of DDP's own times.
print_cifar_table() {
  echo
  echo "cnn_mpi vs PyTorch DDP, weak scaling, ms per epoch of 50000 images: $(head -1 "$results.what" 2>/dev/null)"
  echo "(median of epochs 2..$epochs; DDP: median of 3 epochs after a warm-up one); eff = ms(1 GPU) / (N x ms(N)), the same for DDP_eff"
  printf "%-5s %-10s %-8s %10s %10s %8s %6s %8s %12s %10s %11s %9s %7s %6s\n" ranks batch/rank overlap \
    ms/epoch DDP_ms xDDP eff DDP_eff allreduce_us busbw_GBps exposed_us hidden buckets path
  awk -F, -v ddp="$ddp" '
    BEGIN {
      while ((getline line < ddp) > 0) {
        if (line !~ /^world=/) continue
        n = split(line, f, " ")  # world=W batch_per_rank=B global_batch=G precision=P graph=no ms_per_epoch=X
        delete kv
        for (k = 1; k <= n; ++k) { split(f[k], p, "="); kv[p[1]] = p[2] }
        D[kv["world"], kv["batch_per_rank"]] = kv["ms_per_epoch"]
      }
    }
    NR == 1 { next }
    { rows[NR] = $0; if ($1 == 1) one = $5 }
    END {
      for (i = 2; i <= NR; ++i) {
        split(rows[i], r, ",")
        dd = ((r[1], r[2]) in D) ? D[r[1], r[2]] : ""
        ratio = (dd != "" && r[5] > 0) ? sprintf("%.2f", dd / r[5]) : "-"
        eff = (one != "" && r[5] > 0) ? sprintf("%.0f%%", 100 * one / (r[1] * r[5])) : "-"
        deff = (dd != "" && ((1, r[2]) in D)) ? sprintf("%.0f%%", 100 * D[1, r[2]] / (r[1] * dd)) : "-"
        printf "%-5s %-10s %-8s %10s %10s %8s %6s %8s %12s %10s %11s %9s %7s %6s\n", r[1], r[2], r[4], r[5],
          (dd == "" ? "-" : dd), ratio, eff, deff, r[6], r[7], r[8], r[9], r[11], r[12]
      }
    }' "$results" | tee "$table"
  echo "targets: xDDP >= 2 at 4 and 8 GPUs (bf16); eff >= 85% at 4 GPUs"
}

if [[ -n ${TABLE_ONLY:-} ]]; then
  if [[ ! -f $results ]]; then
    echo "bench-scaling: TABLE_ONLY: no $results (run the benchmark with this OUT and MODEL first)" >&2
    exit 2
  fi
  if [[ $model == seed ]]; then print_seed_table; else print_cifar_table; fi
  exit 0
fi
if [[ $model == cifar && -z ${DATA:-} ]]; then
  mkdir -p "$out"
  make_cifar_data "$data" || { echo "bench-scaling: could not make the random CIFAR-10 data in $data" >&2; exit 1; }
fi
[[ -n ${DATA_ONLY:-} ]] && { echo "data: $data"; exit 0; }
mkdir -p "$out/runs"

available=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
most=0
for n in "${gpu_counts[@]}"; do ((n > most)) && most=$n; done
if ((most > available)); then
  echo "bench-scaling: asked for $most GPUs, nvidia-smi lists $available" >&2
  exit 2
fi
visible=$(seq -s, 0 $((most - 1)))
if [[ ! -x $binary ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90a}" >"$out/cmake.log" 2>&1 &&
    cmake --build build -j "$(nproc)" --target cnn_mpi >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
fi
nvidia-smi -L | head -n "$most" | tee "$out/gpus.txt"
when="date: $(date -u +%Y-%m-%dT%H:%M:%SZ), epochs $epochs (first excluded), overlap modes: $overlaps"
[[ $model == cifar ]] && when+=", cifar $precision, $per_rank images per rank"
echo "$when" | tee "$out/when.txt"

if [[ $model == seed ]]; then
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
          train "$run" "$n" --data "$data" --filters "$d" --batch "$batch" --overlap "$mode" ||
            { echo "FAILED: n=$n d=$d $scaling $mode: $(tail -2 "$run.log" | xargs)"; continue; }
          echo "$n,$d,$scaling,$batch,$mode,$(run_fields "$run")" >>"$results"
        done
      done
    done
  done
  run_anchor
  print_seed_table
else
  echo "cifar preset, $precision, Adam, $per_rank images per rank, data $data" >"$results.what"
  echo "ranks,batch_per_rank,global_batch,overlap_mode,ms_per_epoch,allreduce_us,busbw_GBps,exposed_us,overlap_fraction,overlap,buckets,path" >"$results"
  worlds=()
  for n in "${gpu_counts[@]}"; do
    worlds+=("$n")
    [[ -n ${ONLY:-} && " $ONLY " != *" n$n-cifar "* ]] && continue
    for mode in $overlaps; do
      ((n == 1)) && [[ $mode != "${overlaps%% *}" ]] && continue  # one rank: no allreduce
      run="$out/runs/n$n-cifar-$precision-$mode"
      train "$run" "$n" --dataset cifar10 --data "$data" --model cifar --precision "$precision" --optimizer adam \
        --lr 0.001 --batch $((per_rank * n)) --overlap "$mode" ||
        { echo "FAILED: n=$n cifar $precision $mode: $(tail -2 "$run.log" | xargs)"; continue; }
      echo "$n,$per_rank,$((per_rank * n)),$mode,$(run_fields "$run")" >>"$results"
    done
  done
  run_anchor --worlds "$(IFS=,; echo "${worlds[*]}")" --precision "$precision" --batch-per-rank "$per_rank"
  print_cifar_table
fi
