# Shared by the one-call device scripts in kernels/bench (sourced, not run): configure and build a
# tree, and run one step under its own time limit so that one hang cannot take the rest.
# Expects $out (the log folder) to exist.

# configure SOURCE_DIR BUILD_DIR LOG_NAME: a Release build for sm_90a (H100, H200).
configure() {
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a >"$out/cmake-$3.log" 2>&1
}

# run LIMIT_SECONDS NAME COMMAND...: the command's output goes to $out/NAME.log; prints the exit status.
run() {
  local limit=$1 name=$2
  shift 2
  echo "--- $name"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local status=$?
  echo "$name: exit $status"
  return $status
}

# ncu_cifar_steps BUILD_DIR PRECISIONS CSV_DIR TXT: the kernels of gpu_layers' profile_cifar_steps
# (two eager steps per batch, 512 and 2048, in each of PRECISIONS) under ncu, one line per launch in
# TXT (kernels/bench/ncu_durations.py); the raw csv and ncu's stderr go to CSV_DIR.
ncu_cifar_steps() {
  local metrics=gpu__time_duration.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
  metrics+=,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
  metrics+=,l1tex__throughput.avg.pct_of_peak_sustained_active
  CNN_MEASURE_PRECISIONS=$2 timeout 400 ncu --clock-control none --metrics "$metrics" --csv \
    "$1/tests/gpu_layers" --run_test=profile_cifar_steps >"$3/ncu.csv" 2>"$3/ncu.err"
  echo "ncu exit $?"
  python3 kernels/bench/ncu_durations.py "$3/ncu.csv" >"$4" 2>&1; tail -3 "$4"
}
