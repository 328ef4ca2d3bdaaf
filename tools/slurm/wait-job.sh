#!/usr/bin/env bash
# tools/slurm/wait-job.sh JOBID [TIMEOUT_SECONDS]
#
# Waits for a SLURM job to finish and exits with its exit code, polling `scontrol show job` once a
# second (`sbatch --wait` backs off to 32 s between polls, which makes short CI jobs slow).
# A requeued job (REQUEUED, PENDING again, REQUEUE_HOLD...) is waited for through its restarts.
# Exit codes: the job's own exit code for COMPLETED/FAILED; 1 for CANCELLED, TIMEOUT, NODE_FAIL,
# OUT_OF_MEMORY and the like (the state is printed); 124 when TIMEOUT_SECONDS (default 600) pass.
# Needs SLURM_CONF in the environment for a private cluster (source DIR/env.sh).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 JOBID [TIMEOUT_SECONDS]" >&2
  exit 2
fi
job=$1
deadline=$((SECONDS + ${2:-600}))
while ((SECONDS < deadline)); do
  record=$(scontrol -o show job "$job" 2>/dev/null || true)
  state=$(sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p' <<<"$record")
  case $state in
    COMPLETED | FAILED)
      code=$(sed -n 's/.* ExitCode=\([0-9]*\):\([0-9]*\).*/\1/p' <<<"$record")
      echo "job $job: $state, exit code ${code:-?}" >&2
      exit "${code:-1}"
      ;;
    CANCELLED | TIMEOUT | NODE_FAIL | PREEMPTED | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | SPECIAL_EXIT)
      # SPECIAL_EXIT is a requeue-and-hold; the others are final.
      echo "job $job: $state" >&2
      exit 1
      ;;
    "")
      echo "job $job: unknown to scontrol" >&2
      exit 1
      ;;
  esac
  sleep 1
done
echo "job $job: still ${state:-unknown} after ${2:-600} s" >&2
exit 124
