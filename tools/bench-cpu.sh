#!/usr/bin/env bash
# Training throughput of the CPU backends on this machine, for docs/PERFORMANCE.md.
# For each backend and (global batch, filters) setting: one rank, one warm-up epoch, then
# $EPOCHS measured epochs over $SAMPLES training images; reports the median images/s over the measured
# epochs (min and max beside it), the same as GFLOP/s (the trainer's model_work line:
# Network::flops_per_image) and as a fraction of the FP32 FMA peak of the cores the rank used
# (cnn_peak, measured first, beside its theoretical figure), and the process's peak resident memory.
# Usage: tools/bench-cpu.sh [--quick]      (env: CNN_BINARY, SAMPLES, EPOCHS, BACKENDS, SETTINGS, MODEL)
# MODEL: --model (default seed; SETTINGS' filters then apply only to the seed preset).
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${CNN_BINARY:-build/cnn_mpi}
peak_binary=${CNN_PEAK:-$(dirname "$binary")/cnn_peak}
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
declare -A peak  # by thread count: the measured FP32 FMA peak of that many cores, GFLOP/s
peak_of() {
  if [[ -z ${peak[$1]:-} ]]; then
    "$peak_binary" --threads "$1" >"$work/peak-$1" || { cat "$work/peak-$1"; exit 1; }
    sed 's/^/# /' "$work/peak-$1" | grep -v peak_gflops >&2
    peak[$1]=$(awk '/^peak_gflops/ { print $2 }' "$work/peak-$1")
  fi
}
echo
echo "| backend | threads | batch | filters | images/s (median) | min..max | GFLOP/s | of peak | ms per 60000-image epoch | peak RSS MB |"
echo "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"
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
    mflop=$(awk '/model_work:/ { print $2 }' "$work/log")
    peak_of "$threads" 2>>"$work/peaks"
    read -r gflops fraction <<<"$(awk -v i="$median" -v w="$mflop" -v p="${peak[$threads]}" \
      'BEGIN { g = i * w / 1000; printf "%.1f %.1f%%", g, 100 * g / p }')"
    echo "| $backend | $threads | $batch | $filters | $median | $range | $gflops | $fraction | $ms | $rss_mb |"
  done
done
echo
echo "# peaks (cnn_peak, FP32 FMA, the cores a rank used):"
cat "$work/peaks"
