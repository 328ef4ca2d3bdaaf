#!/usr/bin/env bash
# tools/compare --quick: the header (command, machine, date), both sweep tables with a speedup over
# seq, results.csv and the four PNGs. Kept under 2 minutes on 2 cores.
# Usage: compare_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1
source_dir=$2
binary=${CNN_BINARY:-$build/cnn_mpi}
py=/usr/bin/python3
data=/usr/share/datasets/fashion-mnist
[[ -x $binary ]] || { echo "SKIP: $binary not built"; exit 77; }
[[ -e $data/train-images-idx3-ubyte.gz || -e $data/train-images-idx3-ubyte ]] || { echo "SKIP: no Fashion-MNIST"; exit 77; }
"$py" -c "import matplotlib, numpy" 2>/dev/null || { echo "SKIP: $py lacks matplotlib/numpy (tools/install-deps.sh)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

start=$SECONDS
"$py" "$source_dir/tools/compare" --quick --binary "$binary" --out "$work/out" >"$work/stdout" 2>"$work/stderr" ||
  { cat "$work/stdout" "$work/stderr"; fail "tools/compare --quick failed"; }
echo "tools/compare --quick took $((SECONDS - start)) s"
cat "$work/stdout"
for pattern in "^- command: .*compare.* --quick" "^- machine: .*CPU: .*cores; GPU: " "^- date: 20[0-9][0-9]-" \
  "^## Batch size sweep" "^## Filter sweep" "^\| 1000 \| [0-9]+ \| [0-9]+ .*x \|"; do
  grep -qE -- "$pattern" "$work/stdout" && echo "ok: output has /$pattern/" || fail "output lacks /$pattern/"
done
for f in table.md results.csv epoch_time_vs_batch.png epoch_time_vs_filters.png speedup_over_seq.png scaling_ranks.png; do
  [[ -s $work/out/$f ]] && echo "ok: wrote $f" || fail "no $f"
done
"$py" - "$work/out/results.csv" <<'PY' || fail "results.csv"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
series = {r["series"] for r in rows}
assert {"seq", "threads", "mpi2", "mpi4"} <= series, series
assert all(float(r["ms_per_60000_epoch"]) > 0 for r in rows)
assert all(abs(float(r["speedup_over_seq"]) - 1) < 1e-9 for r in rows if r["series"] == "seq")
print("ok: results.csv has %d rows for %s" % (len(rows), sorted(series)))
PY
[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "all compare checks passed"
