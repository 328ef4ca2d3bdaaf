# Run directories for tests/bad_input/70_run_directory.cases (sourced by bad_input_test.sh: $FX, $CNN, COMMON).
# A run killed in its first epoch: checkpoints, no metrics.csv (it used to be overwritten and pruned).
mkdir -p "$FX/killed" && cp -r "$FX/run/checkpoints" "$FX/killed/"
# Directories that hold only one trace of an earlier run each.
mkdir -p "$FX/runslog_only" "$FX/runid_only" && cp "$FX/run/runs.log" "$FX/runslog_only/" &&
  cp "$FX/run/run_id" "$FX/runid_only/"
# Only the settings file of a run (or a user's own config.toml where the run would write its own).
mkdir -p "$FX/config_only" && cp "$FX/run/config.toml" "$FX/config_only/"
# Another finished run (another seed, another run id), for --resume PATH --out into it.
"$CNN" "${COMMON[@]}" --seed 2 --out "$FX/run2" >/dev/null 2>&1 || { echo "FAIL - the second fixture run failed"; exit 1; }
# Checkpoints that --resume auto cannot use: checkpoints/ holds only a `latest` naming nothing.
mkdir -p "$FX/no_valid/checkpoints" && cp "$FX/run/runs.log" "$FX/no_valid/" &&
  echo "ckpt-e0009-s00000099.h5" >"$FX/no_valid/checkpoints/latest"
# Named pipes where the run's own files belong: nothing may block on them.
mkdir -p "$FX/lock_fifo" "$FX/id_fifo" "$FX/metrics_fifo" && mkfifo "$FX/lock_fifo/run.lock" "$FX/id_fifo/run_id" \
  "$FX/metrics_fifo/metrics.csv" "$FX/trace_fifo.json"
# A run in progress: its lock held by another process for the whole test.
mkdir -p "$FX/busy" && echo "pid 4242 on fixturehost, since 2026-01-01T00:00:00Z, run id fixture" >"$FX/busy/run.lock"
flock "$FX/busy/run.lock" sleep 3600 </dev/null >/dev/null 2>&1 &
BUSY_HOLDER=$!
trap 'kill "$BUSY_HOLDER" 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 50); do flock -n "$FX/busy/run.lock" true || break; sleep 0.1; done
