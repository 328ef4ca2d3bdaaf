# Shared by the GPU script tests that run the trainer on 2 ranks, one per GPU (gpu_overlap_test.sh,
# gpu_peer_allreduce_test.sh). Source it with the script's arguments: BUILD_DIR SOURCE_DIR.
# Env: CNN_BINARY, CNN_FASHION_DIR, PYTHON.
source "$2/tests/gpu_script_lib.sh" "$1" "$2"

# require_two_gpus WHAT: exit 77 (skipped) with fewer than 2 GPUs.
require_two_gpus() {
  if [[ $gpus -lt 2 ]]; then
    echo "SKIP: $1 needs 2 GPUs (nvidia-smi lists $gpus)"
    exit 77
  fi
}

# Why the trainer runs cannot run here (no Fashion-MNIST, no h5py for ckpt_compare), or nothing.
trainer_runs_unavailable() {
  if [[ ! -e $fashion/train-images-idx3-ubyte.gz && ! -e $fashion/train-images-idx3-ubyte ]]; then
    echo "Fashion-MNIST not found in $fashion (set CNN_FASHION_DIR)"
  elif ! "$python" -c "import h5py" 2>/dev/null; then
    echo "$python has no h5py (set PYTHON)"
  fi
}

# run NAME [VAR=value...] -- [options...]: 2 ranks of the trainer with the caller's ${small[@]} and
# the options, into $work/NAME (log: $work/NAME.log); the variables are set here and passed to the
# ranks. A non-zero exit is a failure, with the log's last lines.
run() {
  local name=$1; shift
  local envs=()
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=(-x "$1"); export "${1%%=*}=${1#*=}"; shift; done
  shift
  if mpirun -np 2 -x NCCL_NVLS_ENABLE "${envs[@]}" "$binary" "${small[@]}" "$@" --out "$work/$name" >"$work/$name.log" 2>&1; then
    return 0
  fi
  fail "$name: exit $?: $(tail -3 "$work/$name.log" | xargs)"
  return 1
}

# overlap_grid LABEL [options...]: runs --overlap on with the step as a CUDA graph and eagerly
# (CNN_CUDA_GRAPHS 1, 0) and with 2 buckets and 1 (CNN_OVERLAP_CUTS 1, 0), into $work/on-graphsG-cutsC,
# and holds each against the run "off" BITWISE. A caller that defines check_overlap_run NAME CUTS
# gets it called on each run first.
overlap_grid() {
  local label=$1; shift
  local graphs cuts name out
  for graphs in 1 0; do
    for cuts in 1 0; do
      name="on-graphs$graphs-cuts$cuts"
      run "$name" CNN_CUDA_GRAPHS=$graphs CNN_OVERLAP_CUTS=$cuts -- "$@" --overlap on || continue
      if declare -F check_overlap_run >/dev/null; then check_overlap_run "$name" "$cuts"; fi
      if out=$("$python" "$compare" exact "$(latest "$work/$name")" "$(latest "$work/off")" 2>&1); then
        pass "$label$name vs --overlap off after 20 steps: $out"
      else
        fail "$label$name differs from --overlap off: $out"
      fi
    done
  done
  unset CNN_CUDA_GRAPHS CNN_OVERLAP_CUTS
}
