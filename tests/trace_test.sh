#!/usr/bin/env bash
# --trace under 2 ranks: valid JSON in the Chrome trace format, only the --trace-steps window, a named
# track ("rank R (host)") with every window step for each rank; and the file's size does not grow
# with the run's length.
# Usage: trace_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1
binary=${CNN_BINARY:-$build/cnn_mpi}
py=/usr/bin/python3
data=/usr/share/datasets/fashion-mnist
[[ -x $binary ]] || { echo "SKIP: $binary not built"; exit 77; }
[[ -e $data/train-images-idx3-ubyte.gz || -e $data/train-images-idx3-ubyte ]] || { echo "SKIP: no Fashion-MNIST"; exit 77; }
"$binary" --help | grep -q -- '--trace-steps' || { echo "SKIP: this cnn_mpi has no --trace yet"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
small=(--data "$data" --test-samples 200 --filters 8 --batch 100 --threads 1 --quiet)

# 20 steps per epoch, 2 epochs: the window 15:25 crosses the epoch boundary.
mpirun -np 2 --oversubscribe "$binary" "${small[@]}" --train-samples 2000 --epochs 2 --trace "$work/short.json" \
  --trace-steps 15:25 --out "$work/short" >"$work/short.log" 2>&1 || fail "short run: $(tail -3 "$work/short.log")"
# 3x as many steps, same window: the same number of events.
mpirun -np 2 --oversubscribe "$binary" "${small[@]}" --train-samples 6000 --epochs 2 --trace "$work/long.json" \
  --trace-steps 15:25 --out "$work/long" >"$work/long.log" 2>&1 || fail "long run: $(tail -3 "$work/long.log")"

"$py" - "$work/short.json" "$work/long.json" <<'PY' || fail "trace content"
import json, sys
failures = []
counts = []
for path in sys.argv[1:]:
    with open(path) as f:
        trace = json.load(f)  # valid JSON, or this raises
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    if sorted(names) != [0, 1] or not all(names[r].startswith("rank %d (" % r) for r in names):
        failures.append("%s: process names %s" % (path, names))
    complete = [e for e in events if e["ph"] == "X"]
    if any(e["ph"] not in ("X", "M") for e in events):
        failures.append("%s: unexpected event types" % path)
    for rank in (0, 1):
        steps = sorted(e["args"]["step"] for e in complete if e["pid"] == rank and e["name"] == "step")
        if steps != list(range(15, 25)):
            failures.append("%s: rank %d steps %s, expected 15..24" % (path, rank, steps))
        phases = {e["name"] for e in complete if e["pid"] == rank}
        for needed in ("forward", "backward", "allreduce", "update"):
            if needed not in phases:
                failures.append("%s: rank %d has no %s events" % (path, rank, needed))
    if any(e["dur"] < 0 or e["ts"] < 0 for e in complete):
        failures.append("%s: negative ts or dur" % path)
    # The epoch-end evaluation joins the window only where an epoch ends inside it (the short run).
    counts.append(len([e for e in complete if e["name"] != "eval"]))
    if path.endswith("short.json") and not any(e["name"] == "eval" for e in complete):
        failures.append("%s: no eval event after the epoch's last step (19) in the window" % path)
if counts[0] != counts[1]:
    failures.append("event counts grow with the run: %s" % counts)
print("\n".join("FAIL: " + f for f in failures) or "trace: %d complete events per file, steps 15..24, ranks 0 and 1" % counts[0])
sys.exit(1 if failures else 0)
PY
[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "all trace checks passed"
