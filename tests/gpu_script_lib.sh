# Shared by the GPU script tests (gpu_train_test.sh, gpu_predict_test.sh, gpu_precision_test.sh and,
# through gpu_two_ranks_lib.sh, the 2-GPU ones). Source it with the script's arguments: BUILD_DIR
# SOURCE_DIR. It sets build, source_dir, binary, fashion, python, compare and gpus, sources
# tools/mpi-env.sh, makes $work (removed on exit), and gives pass / fail (counted in $failures),
# latest (a run's newest checkpoint), same (two runs' newest checkpoints compared) and skip_unless_gpu_runs.
# Env: CNN_BINARY, CNN_FASHION_DIR, PYTHON.
set -uo pipefail
build=$1
source_dir=$2
binary=${CNN_BINARY:-$build/cnn_mpi}
fashion=${CNN_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
python=${PYTHON:-python3}
compare="$source_dir/tests/ckpt_compare.py"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on shared GPU hosts
source "$source_dir/tools/mpi-env.sh"

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
failures=0
pass() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; failures=$((failures + 1)); }
latest() { echo "$1/checkpoints/$(cat "$1/checkpoints/latest")"; }
# same NAME MODE A B: ckpt_compare.py MODE (exact, rel=TOL, relnorm=TOL) on the newest checkpoints of
# the runs in $work/A and $work/B; passes or fails NAME with its verdict.
same() {
  local out
  if out=$("$python" "$compare" "$2" "$(latest "$work/$3")" "$(latest "$work/$4")" 2>&1); then
    pass "$1: $out"
  else
    fail "$1: $out"
  fi
}

# auto_choice NAME FILE STEPS: the path --steps-per-launch auto took (step_path_advisor.hpp), from its
# settings line in FILE, in $taken: kernel (chunks of up to STEPS) or loop (one step per call). Passes
# where the line names the path with both measured times and the path taken is the one it measured
# no slower (in the printed ms); fails, with taken=none, otherwise.
auto_choice() {
  local line kernel_ms=0 loop_ms=0
  line=$(grep -m1 "steps_per_launch:" "$2" | xargs)
  taken=none
  if [[ $line =~ "steps_per_launch: up to $3 (persistent kernel"(", the gradients summed over the ranks inside it")?": "([0-9.]+)" ms a step, one launch per step "([0-9.]+)" ms, measured)" ]]; then
    taken=kernel kernel_ms=${BASH_REMATCH[2]} loop_ms=${BASH_REMATCH[3]}
  elif [[ $line =~ "steps_per_launch: 1 (auto: one launch per step measured faster: "([0-9.]+)" ms a step, the persistent kernel "([0-9.]+)" ms)" ]]; then
    taken=loop loop_ms=${BASH_REMATCH[1]} kernel_ms=${BASH_REMATCH[2]}
  fi
  if [[ $taken != none ]] && awk -v t="$taken" -v k="$kernel_ms" -v l="$loop_ms" \
       'BEGIN { exit !(k > 0 && l > 0 && (t == "kernel" ? k <= l : l <= k)) }'; then
    pass "$1: auto took the $taken path, measured: $line"
  else
    fail "$1: auto's settings line: $line"
    taken=none
  fi
}

# skip_unless_gpu_runs [h5py]: exit 77 (skipped) with one line where the trainer cannot run on a GPU
# here: no GPU, a build without the CUDA backend, no Fashion-MNIST; and, with h5py, no h5py for
# ckpt_compare.py.
skip_unless_gpu_runs() {
  if [[ $gpus -eq 0 ]]; then
    echo "SKIP: no usable GPU (nvidia-smi lists none)"
    exit 77
  fi
  if grep -q 'CNN_ENABLE_CUDA:STRING=OFF' "$build/CMakeCache.txt" 2>/dev/null; then
    echo "SKIP: this build has no CUDA backend"
    exit 77
  fi
  if [[ ! -e $fashion/train-images-idx3-ubyte.gz && ! -e $fashion/train-images-idx3-ubyte ]]; then
    echo "SKIP: Fashion-MNIST not found in $fashion (set CNN_FASHION_DIR)"
    exit 77
  fi
  if [[ ${1:-} == h5py ]] && ! "$python" -c "import h5py" 2>/dev/null; then
    echo "SKIP: $python has no h5py (set PYTHON)"
    exit 77
  fi
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
