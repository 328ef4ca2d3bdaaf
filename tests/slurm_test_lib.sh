# shellcheck shell=bash
# tests/slurm_test_lib.sh: sourced by the SLURM script tests (slurm_test.sh on one node,
# slurm_two_node_test.sh on two): log lines, verdicts, waiting for jobs, and the checks of a run's
# results. Set TEST_NAME before sourcing; these need SOURCE_DIR and PY (a python3 with h5py).

T0=$SECONDS
say() { printf '[%s %3ds] %s\n' "$TEST_NAME" $((SECONDS - T0)) "$*"; }
fail() {
  say "FAIL: $*"
  exit 1
}
skip() {
  say "SKIP: $*"
  exit 77
}

wait_job() { "$SOURCE_DIR/tools/slurm/wait-job.sh" "$@"; }
job_state() { scontrol -o show job "$1" | sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p'; }
show_output() {
  say "---- $1"
  cat "$1" 2>&1 || true
}

# Checks a metrics.csv: EPOCHS rows, epochs 1..EPOCHS in order, finite losses, final accuracy
# well above chance (0.1) for Fashion-MNIST.
check_metrics() {
  "$PY" - "$1" "$2" "$3" <<'PYTHON'
import csv, math, sys
path, epochs, min_acc = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rows = list(csv.DictReader(open(path)))
got = [int(r["epoch"]) for r in rows]
assert got == list(range(1, epochs + 1)), f"{path}: epochs {got}, expected 1..{epochs}"
for r in rows:
    for k in ("train_loss", "test_loss"):
        assert math.isfinite(float(r[k])), f"{path}: epoch {r['epoch']} {k} = {r[k]}"
acc = float(rows[-1]["test_accuracy"])
assert min_acc <= acc <= 1.0, f"{path}: final test accuracy {acc} not in [{min_acc}, 1]"
print(f"{path}: {epochs} epochs, final test accuracy {acc:.3f}")
PYTHON
}

# The newest checkpoint of a run directory.
latest_checkpoint() { echo "$1/checkpoints/$(cat "$1/checkpoints/latest")"; }

# Compares the /model datasets of two checkpoints bit for bit.
compare_models() {
  "$PY" - "$1" "$2" <<'PYTHON'
import sys
import h5py
import numpy as np
a_path, b_path = sys.argv[1], sys.argv[2]
def datasets(f):
    found = {}
    f["model"].visititems(lambda name, obj: found.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return found
with h5py.File(a_path, "r") as fa, h5py.File(b_path, "r") as fb:
    a, b = datasets(fa), datasets(fb)
    assert a, f"{a_path}: no datasets under /model"
    assert sorted(a) == sorted(b), f"different /model datasets: {sorted(a)} vs {sorted(b)}"
    for name in sorted(a):
        x, y = np.asarray(a[name]), np.asarray(b[name])
        assert x.dtype == y.dtype and x.shape == y.shape, f"/model/{name}: {x.dtype}{x.shape} vs {y.dtype}{y.shape}"
        if x.tobytes() != y.tobytes():
            diff = np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))
            sys.exit(f"/model/{name} differs (max |diff| {diff:g})")
    for key in ("epoch", "global_step"):
        assert fa["progress"].attrs[key] == fb["progress"].attrs[key], f"/progress {key} differs"
    print(f"{len(a)} /model datasets bitwise equal ({sum(v.size for v in a.values())} values), "
          f"epoch {fa['progress'].attrs['epoch']}, global step {fa['progress'].attrs['global_step']}")
PYTHON
}
