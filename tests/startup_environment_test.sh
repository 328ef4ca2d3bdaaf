#!/bin/bash
# No thread of cnn_mpi reads the environment while MPI_Init or MPI_Finalize writes it on another.
# glibc's getenv is not safe against a concurrent setenv (MPI_Init sets OMPI_*, PMIX_*, ...); the data
# loader that overlaps MPI_Init once crashed inside libhdf5's getenv in CI (docs/RELIABILITY.md).
# startup_environment/getenv_watch.c, preloaded, reports each such read; every data format, the
# error exit, checkpoint writing and a two-rank launch run under it and must give no report. A positive
# control (a thread that calls getenv during MPI_Init) must give one, or the watch is not working.
# Usage: startup_environment_test.sh BUILD_DIR SOURCE_DIR
set -u
BUILD_DIR=$1
SOURCE_DIR=$2
CNN=$(realpath "${CNN_BINARY:-$BUILD_DIR/cnn_mpi}")
PY=/usr/bin/python3   # Debian's python, as in the other tests
MPIRUN=${MPIEXEC:-mpirun}
[ -x "$CNN" ] || { echo "SKIP: $CNN not built"; exit 77; }
source "$SOURCE_DIR/tools/mpi-env.sh"  # mpirun as root (containers, CI)
# A sanitizer runtime linked as a shared library must come first in the process: a preloaded library
# ahead of it is refused. (The sanitizer run's clang links its runtime statically: that build runs.)
if ldd "$CNN" | grep -q 'libasan\|libtsan'; then echo "SKIP: $CNN links a shared sanitizer runtime"; exit 77; fi
command -v mpicc >/dev/null || { echo "SKIP: no mpicc for the watch's positive control"; exit 77; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/cnn_startup_env.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
HERE=$SOURCE_DIR/tests/startup_environment
cc -O2 -shared -fPIC "$HERE/getenv_watch.c" -o "$WORK/getenv_watch.so" -ldl || { echo "FAIL - the watch did not build"; exit 1; }
mpicc -O2 "$HERE/getenv_during_init.c" -o "$WORK/getenv_during_init" -lpthread ||
  { echo "FAIL - the positive control did not build"; exit 1; }
FAILURES=0

# run NAME EXPECTED_EXIT WANT_REPORT COMMAND...: the command under the watch (EXPECTED_EXIT any: not checked).
run() {
  local name=$1 expected=$2 want_report=$3; shift 3
  local code
  # Ahead of what the run preloads already (the sanitizer run's keep_plugins.so, tools/test-sanitizers.sh).
  (cd "$WORK" && LD_PRELOAD=$WORK/getenv_watch.so${LD_PRELOAD:+:$LD_PRELOAD} "$@" >"$WORK/out" 2>"$WORK/err" </dev/null)
  code=$?
  local reports
  reports=$(grep -c '^getenv_watch:' "$WORK/err")
  if { [ "$expected" != any ] && [ "$code" -ne "$expected" ]; } || { [ "$want_report" = no ] && [ "$reports" -ne 0 ]; } ||
     { [ "$want_report" = yes ] && [ "$reports" -eq 0 ]; }; then
    echo "FAIL - $name: exit $code (expected $expected), $reports watch report(s) (expected: $want_report)"
    sed 's/^/    | /' "$WORK/err" | head -12
    FAILURES=$((FAILURES + 1))
  else
    echo "ok   - $name: exit $code, $reports watch report(s)"
  fi
}

# Fixtures: MNIST-format IDX (200 + 100 images of 28x28), the same gzipped and as HDF5, CIFAR-10 batches
# of 12 records, and an HDF5 directory whose test.h5 is a Unix socket (the case that crashed).
"$PY" - "$WORK" <<'PYEOF'
import gzip, os, random, socket, struct, sys
random.seed(7)
work = sys.argv[1]
def idx(path, count, size=None):
    body = (b"\0\0\x08\x01" + struct.pack(">I", count) + bytes(random.randrange(10) for _ in range(count))
            if size is None else
            b"\0\0\x08\x03" + struct.pack(">III", count, size, size) + bytes(random.randrange(256) for _ in range(count * size * size)))
    with open(work + "/idx/" + path, "wb") as f: f.write(body)
    with gzip.open(work + "/idx_gz/" + path + ".gz", "wb") as f: f.write(body)
for d in ("idx", "idx_gz", "cifar", "h5_socket"): os.makedirs(work + "/" + d)
idx("train-images-idx3-ubyte", 200, 28); idx("train-labels-idx1-ubyte", 200)
idx("t10k-images-idx3-ubyte", 100, 28); idx("t10k-labels-idx1-ubyte", 100)
for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
    with open(work + "/cifar/" + name, "wb") as f:
        for _ in range(12): f.write(bytes([random.randrange(10)]) + bytes(random.randrange(256) for _ in range(3072)))
socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).bind(work + "/h5_socket/test.h5")
PYEOF
"$BUILD_DIR/cnn_convert" --dataset mnist --data "$WORK/idx" --out "$WORK/h5" >/dev/null ||
  { echo "FAIL - cnn_convert could not make the HDF5 fixture"; exit 1; }
cp "$WORK/h5/train.h5" "$WORK/h5_socket/"

run "positive control: getenv on a thread during MPI_Init" any yes "$WORK/getenv_during_init"
COMMON=(--filters 4 --batch 50 --epochs 2 --threads 1 --quiet --backend threads --checkpoint-every 1)
run "idx"                     0 no "$CNN" "${COMMON[@]}" --dataset mnist --data "$WORK/idx" --out "$WORK/run_idx"
run "idx.gz"                  0 no "$CNN" "${COMMON[@]}" --dataset mnist --data "$WORK/idx_gz" --out "$WORK/run_gz"
run "cifar10"                 0 no "$CNN" "${COMMON[@]}" --dataset cifar10 --data "$WORK/cifar" --batch 20 --out "$WORK/run_cifar"
run "hdf5 in memory"          0 no "$CNN" "${COMMON[@]}" --dataset hdf5 --data "$WORK/h5" --out "$WORK/run_h5"
run "hdf5 stream"             0 no "$CNN" "${COMMON[@]}" --dataset hdf5 --data-mode stream --data "$WORK/h5" --out "$WORK/run_h5s"
run "hdf5 stream, test.h5 a socket (exit 3)" 3 no "$CNN" "${COMMON[@]}" --dataset hdf5 --data-mode stream --data "$WORK/h5_socket" --out "$WORK/run_sock"
run "hdf5, 2 ranks under mpirun" 0 no "$MPIRUN" -np 2 --oversubscribe -x LD_PRELOAD "$CNN" "${COMMON[@]}" --dataset hdf5 --data "$WORK/h5" --out "$WORK/run_h5_np2"
[ "$FAILURES" -eq 0 ] && echo "startup_environment: all cases passed" || echo "startup_environment: $FAILURES failed"
[ "$FAILURES" -eq 0 ]
