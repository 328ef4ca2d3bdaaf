# Shared by the one-call device scripts in kernels/bench (sourced, not run): configure and build a
# tree, and run one step under its own time limit so that one hang cannot take the rest.
# Expects $out (the log folder) to exist.

# configure SOURCE_DIR BUILD_DIR LOG_NAME: a Release build for sm_90 (H100, H200).
configure() {
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$out/cmake-$3.log" 2>&1
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
