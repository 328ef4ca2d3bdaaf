#!/usr/bin/env bash
# Stream vs memory mode for HDF5 input (docs/DATA.md), for docs/PERFORMANCE.md: converts Fashion-MNIST
# with cnn_convert, then trains the seed model (threads backend, defaults otherwise) on 1 and 2 ranks in
# both modes, the four configurations interleaved $REPEATS times so that load from other processes
# falls on all of them alike. Reports images/s per epoch (median and best over repeats), the CPU time
# (user + system, all ranks) per 1000 training images, which other processes disturb far less than
# wall time, and the peak RSS of the largest process.
# Usage: tools/bench-data.sh     (env: CNN_BINARY, CNN_CONVERT, DATA, EPOCHS, REPEATS, CONVERT_ARGS, WINDOW_MB)
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/mpi-env.sh
binary=${CNN_BINARY:-build/cnn_mpi}
convert=${CNN_CONVERT:-$(dirname "$binary")/cnn_convert}
data=${DATA:-/usr/share/datasets/fashion-mnist}
epochs=${EPOCHS:-2}
repeats=${REPEATS:-3}
window=${WINDOW_MB:-64}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$convert" --dataset fashion --data "$data" --out "$work/h5" ${CONVERT_ARGS:-} >/dev/null
echo "# cnn_mpi HDF5 stream vs memory: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "# command: tools/bench-data.sh  (EPOCHS=$epochs REPEATS=$repeats WINDOW_MB=$window CONVERT_ARGS='${CONVERT_ARGS:-}'), load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$repeats"); do
  for ranks in 1 2; do
    for mode in memory stream; do
      out="$work/run-$ranks-$mode-$r"
      launch=()
      [ "$ranks" -gt 1 ] && launch=(mpirun --oversubscribe -np "$ranks")
      /usr/bin/time -f '%M %U %S' -o "$out.rss" "${launch[@]}" "$binary" --dataset hdf5 --data "$work/h5" --data-mode "$mode" \
        --stream-window-mb "$window" --backend threads --epochs "$epochs" --out "$out" --quiet >"$out.log" 2>&1 ||
        { cat "$out.log"; exit 1; }
      awk -F, -v ranks="$ranks" -v mode="$mode" 'NR > 1 { print ranks, mode, $1, $5 }' "$out/metrics.csv" >>"$work/all"
      echo "$ranks $mode $(tail -1 "$out.rss") $epochs" >>"$work/rss"
    done
  done
done
echo
median() { sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f %.2f %.2f", m, v[1], v[NR] }'; }
echo "| ranks | mode | epoch | images/s, median of $repeats | best | CPU s per 1000 images (whole run), median | peak RSS MB |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"
for ranks in 1 2; do
  for mode in memory stream; do
    # The whole run's CPU time over every image it trained on (train images x epochs).
    cpu=$(awk -v r="$ranks" -v m="$mode" -v n=60000 '$1 == r && $2 == m { print ($4 + $5) / (n * $6) * 1000 }' "$work/rss" | median)
    rss=$(awk -v r="$ranks" -v m="$mode" '$1 == r && $2 == m { if ($3 > x) x = $3 } END { printf "%.0f", x / 1024 }' "$work/rss")
    for epoch in $(seq 1 "$epochs"); do
      read -r med low high <<<"$(awk -v r="$ranks" -v m="$mode" -v e="$epoch" '$1 == r && $2 == m && $3 == e { print $4 }' "$work/all" | median)"
      echo "| $ranks | $mode | $epoch | ${med%.*} | ${high%.*} | ${cpu%% *} | $rss |"
    done
  done
done
