#!/usr/bin/env bash
# Training throughput of the CPU backends on this machine, for docs/PERFORMANCE.md.
# For each backend and (global batch, filters) setting: one rank, one warm-up epoch, then
# $EPOCHS measured epochs over $SAMPLES training images; reports the median images/s over the measured
# epochs (min and max beside it) and the process's peak resident memory.
# Usage: tools/bench-cpu.sh [--quick]      (env: CNN_BINARY, SAMPLES, EPOCHS, BACKENDS, SETTINGS, MODEL)
# MODEL: --model (default seed; SETTINGS' filters then apply only to the seed preset).
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${CNN_BINARY:-build/cnn_mpi}
samples=${SAMPLES:-20000}
epochs=${EPOCHS:-3}
if [[ ${1:-} == --quick ]]; then samples=3000; epochs=2; fi
backends=${BACKENDS:-"seq threads"}
settings=${SETTINGS:-"1000:64 100:64 1000:256"}
model=${MODEL:-seed}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "# cnn_mpi CPU benchmark: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "# command: tools/bench-cpu.sh $*  (SAMPLES=$samples EPOCHS=$epochs MODEL='$model', one warm-up epoch, median of the rest)"
echo
echo "| backend | threads | batch | filters | images/s (median) | min..max | ms per 60000-image epoch | peak RSS MB |"
echo "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |"
for backend in $backends; do
  for setting in $settings; do
    batch=${setting%%:*}
    filters=${setting##*:}
    out="$work/$backend-$batch-$filters"
    /usr/bin/time -f '%M' -o "$work/rss" "$binary" --model "$model" --backend "$backend" --batch "$batch" --filters "$filters" \
      --epochs $((epochs + 1)) --train-samples "$samples" --test-samples 1000 --out "$out" --quiet >"$work/log" 2>&1 ||
      { cat "$work/log"; exit 1; }
    threads=$(awk '/threads_per_rank:/ { print $2 }' "$work/log")
    # Epoch 1 is the warm-up; the median over the rest.
    stats=$(awk -F, 'NR > 2 { print $5 }' "$out/metrics.csv" | sort -g |
      awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
             printf "%.0f %.0f..%.0f %.1f", m, v[1], v[NR], 60000 / m * 1000 }')
    read -r median range ms <<<"$stats"
    rss_mb=$(awk '{ printf "%.0f", $1 / 1024 }' "$work/rss")
    echo "| $backend | $threads | $batch | $filters | $median | $range | $ms | $rss_mb |"
  done
done
