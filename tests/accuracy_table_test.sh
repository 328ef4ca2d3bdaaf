#!/usr/bin/env bash
# tools/accuracy-table.sh on tiny synthetic IDX data (32 training and 20 test images of 28x28, random
# labels) with the resnet10 preset, 2 seeds and 2 epochs: the table's shape (8 columns, a row per run
# and a mean row per data set), its numbers against the runs' own metrics.csv, a target that every
# run reaches in epoch 1 (0%: pass, time to target = epoch 1's training time) and one that none can
# reach (100% on random labels: fail, "not reached"), and bad usage (exit 2, one line). A few seconds.
# Usage: accuracy_table_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source_dir=$2
binary=${CNN_BINARY:-$build/cnn_mpi}
tool=$source_dir/tools/accuracy-table.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# IDX files (magic 0x803 images, 0x801 labels; big-endian sizes) of random pixels and labels.
make_idx() {
  python3 - "$1" "$2" <<'EOF'
import os, random, struct, sys
out, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
os.makedirs(out, exist_ok=True)
for prefix, count in (("train", 32), ("t10k", 20)):
    with open(f"{out}/{prefix}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, count, 28, 28) + bytes(rng.randrange(256) for _ in range(count * 784)))
    with open(f"{out}/{prefix}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, count) + bytes(rng.randrange(10) for _ in range(count)))
EOF
}
make_idx "$work/fashion" 1
make_idx "$work/mnist" 2

"$tool" --binary "$binary" --fashion "$work/fashion" --mnist "$work/mnist" --seeds 1,2 --epochs 2 \
  --fashion-target 0 --mnist-target 100 --out "$work/runs" -- --backend threads --threads 1 --batch 16 \
  >"$work/stdout" 2>"$work/stderr" || { cat "$work/stdout" "$work/stderr"; fail "the tool failed"; }
cat "$work/stdout"
cmp -s "$work/stdout" "$work/runs/table.md" || fail "table.md differs from what was printed"

# The table: a header, its separator, then 2 data sets x (2 runs + a mean row), 8 cells each.
grep '^|' "$work/stdout" >"$work/table"
[ "$(wc -l <"$work/table")" -eq 8 ] || fail "expected 8 table lines, got $(wc -l <"$work/table")"
awk -F'|' '{ if (NF != 10) { print "line " NR " has " NF - 2 " cells: " $0; bad = 1 } } END { exit bad }' "$work/table" ||
  fail "every line needs 8 cells"
cell() { awk -F'|' -v row="$1" -v col="$2" 'NR == row { gsub(/^ +| +$/, "", $(col + 1)); print $(col + 1) }' "$work/table"; }
[ "$(cell 1 7)" = "time to target" ] || fail "column 7 is '$(cell 1 7)'"
[ "$(cell 3 1)" = fashion-mnist ] && [ "$(cell 3 2)" = 1 ] && [ "$(cell 4 2)" = 2 ] || fail "fashion-mnist's run rows"
[ "$(cell 5 1)" = "**fashion-mnist**" ] && [ "$(cell 5 2)" = mean ] || fail "fashion-mnist's mean row"
[ "$(cell 8 1)" = "**mnist**" ] || fail "mnist's mean row"
grep -q -- '--model resnet10 --quiet --checkpoint-every 0 --epochs 2 .* --backend threads --threads 1 --batch 16' \
  "$work/stdout" || fail "the header's command"
grep -q '^- ran on: rank 0/1 on .*: threads backend, 1 CPU thread' "$work/stdout" || fail "the header's device line"

# The numbers are the runs' own: final accuracy, epoch 1's seconds as the time to a 0% target, all epochs'.
metrics=$work/runs/fashion-mnist-seed1/metrics.csv
[ "$(awk -F, 'NR > 1' "$metrics" | wc -l)" -eq 2 ] || fail "the run did not train 2 epochs"
expected_final=$(awk -F, 'END { printf "%.2f%%", 100 * $4 }' "$metrics")
expected_first=$(awk -F, 'NR == 2 { printf "%.2f s (epoch 1)", $6 }' "$metrics")
expected_total=$(awk -F, 'NR > 1 { t += $6 } END { printf "%.2f s", t }' "$metrics")
[ "$(cell 3 3)" = 2 ] || fail "epochs '$(cell 3 3)'"
[ "$(cell 3 4)" = "$expected_final" ] || fail "final accuracy '$(cell 3 4)', metrics.csv says $expected_final"
[ "$(cell 3 6)" = reached ] || fail "a 0% target is reached: '$(cell 3 6)'"
[ "$(cell 3 7)" = "$expected_first" ] || fail "time to target '$(cell 3 7)', metrics.csv says $expected_first"
[ "$(cell 3 8)" = "$expected_total" ] || fail "training time '$(cell 3 8)', metrics.csv says $expected_total"
[ "$(cell 5 6)" = "**pass**" ] || fail "fashion-mnist's verdict '$(cell 5 6)'"
[[ $(cell 5 7) =~ ^[0-9]+\.[0-9]{2}\ s$ ]] || fail "fashion-mnist's mean time to target '$(cell 5 7)'"
[ "$(cell 6 6)" = below ] && [ "$(cell 6 7)" = "not reached" ] || fail "mnist seed 1 at 100%: '$(cell 6 6)', '$(cell 6 7)'"
[ "$(cell 8 6)" = "**fail**" ] && [ "$(cell 8 7)" = "not reached in 2 of 2" ] || fail "mnist's mean row: '$(cell 8 6)', '$(cell 8 7)'"
grep -q "preset_defaults: resnet10: --optimizer momentum, .*; given instead: --batch, --epochs" "$work/runs/mnist-seed2.log" ||
  fail "the run's settings block does not say what came from the preset"

# Bad usage: one line, exit 2, nothing run.
set +e
"$tool" --binary "$binary" --fashion "$work/none" --datasets fashion-mnist --out "$work/bad" >"$work/bad.out" 2>"$work/bad.err"
code=$?
set -e
[ "$code" -eq 2 ] || fail "a missing data directory exited $code, not 2"
[ "$(wc -l <"$work/bad.err")" -eq 1 ] && grep -q "fashion-mnist: no directory $work/none (give --fashion DIR" "$work/bad.err" ||
  fail "a missing data directory: $(cat "$work/bad.err")"
[ ! -e "$work/bad" ] || fail "a refused table created its --out"
echo "accuracy_table_test: passed"
