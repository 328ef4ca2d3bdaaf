#!/usr/bin/env bash
# The accuracy table of a preset (issue 26, part 4; docs/TRAINING.md, "Presets and their recipes"):
# trains --model MODEL (default resnet10) with its own defaults on Fashion-MNIST and MNIST for each
# seed (default 1, 2, 3), then prints a markdown table: each run's final test accuracy, the mean over
# the seeds against the target (Fashion-MNIST >= 93.0%, MNIST >= 99.4%), and the training time to the
# target: the wall time of the training steps (metrics.csv's epoch_seconds: evaluation, checkpoints and
# start-up excluded), summed over the epochs up to the first whose test accuracy reached the target.
#
# Usage: tools/accuracy-table.sh [OPTIONS] [-- CNN_MPI_ARGS...]
#   --binary PATH         cnn_mpi to run (default: build/cnn_mpi; env CNN_BINARY)
#   --fashion DIR         Fashion-MNIST's IDX files (default: $CNN_FASHION_DIR, else /usr/share/datasets/fashion-mnist)
#   --mnist DIR           MNIST's IDX files (default: $CNN_MNIST_DIR, else ../shared/data/mnist beside the source tree)
#   --datasets LIST       comma list of fashion-mnist, mnist (default: both)
#   --seeds LIST          comma list of seeds (default: 1,2,3)
#   --epochs N            the epoch cap (default: the preset's own); the targets allow at most 20
#   --model NAME          the preset or spec to train (default: resnet10)
#   --fashion-target PCT  (default 93.0)     --mnist-target PCT  (default 99.4)
#   --launcher 'CMD'      put before each run, e.g. 'mpirun -np 2' (default: none, one rank)
#   --out DIR             where the runs, their logs and table.md go (default: a new directory in /tmp); kept
# CNN_MPI_ARGS go to every run after the tool's own: --backend cuda, --precision tf32, --threads 2, ...
# (they may change the preset's settings too; the table's header prints the whole command).
# Examples:
#   tools/accuracy-table.sh --fashion .carry/fashion-mnist --mnist .carry/mnist -- --backend cuda  # one GPU
#   tools/accuracy-table.sh -- --backend threads --threads 2                                       # 2 CPU cores
# Exit: 0 when every run finished (whatever the accuracy), 1 when a run failed, 2 for bad usage.
set -euo pipefail

usage_error() {
  echo "accuracy-table.sh: $1 (see the usage at the top of $0)" >&2
  exit 2
}

source_dir=$(cd "$(dirname "$0")/.." && pwd)
binary=${CNN_BINARY:-$source_dir/build/cnn_mpi}
# The data's places as the tests find them (CNN_FASHION_DIR and CNN_MNIST_DIR: tools/gpu-validate.sh).
fashion_dir=${CNN_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
mnist_dir=${CNN_MNIST_DIR:-${CNN_SHARED_DIR:-$source_dir/../shared}/data/mnist}
datasets=fashion-mnist,mnist
seeds=1,2,3
epochs=
model=resnet10
fashion_target=93.0
mnist_target=99.4
launcher=
out=
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --) shift; extra=("$@"); break ;;
    --binary | --fashion | --mnist | --datasets | --seeds | --epochs | --model | --fashion-target | --mnist-target | \
      --launcher | --out)
      [ $# -ge 2 ] || usage_error "$1 needs a value"
      case $1 in
        --binary) binary=$2 ;;
        --fashion) fashion_dir=$2 ;;
        --mnist) mnist_dir=$2 ;;
        --datasets) datasets=$2 ;;
        --seeds) seeds=$2 ;;
        --epochs) epochs=$2 ;;
        --model) model=$2 ;;
        --fashion-target) fashion_target=$2 ;;
        --mnist-target) mnist_target=$2 ;;
        --launcher) launcher=$2 ;;
        --out) out=$2 ;;
      esac
      shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown option '$1'" ;;
  esac
done

[ -x "$binary" ] || usage_error "--binary $binary is not an executable (build it, or give --binary PATH)"
is_percent() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v p="$1" 'BEGIN { exit !(p <= 100) }'; }
is_percent "$fashion_target" || usage_error "--fashion-target must be a percentage 0..100 (got '$fashion_target')"
is_percent "$mnist_target" || usage_error "--mnist-target must be a percentage 0..100 (got '$mnist_target')"
[[ $seeds =~ ^[0-9]+(,[0-9]+)*$ ]] || usage_error "--seeds must be a comma list of whole numbers (got '$seeds')"
if [ -n "$epochs" ]; then
  [[ $epochs =~ ^[1-9][0-9]*$ ]] || usage_error "--epochs must be a positive whole number (got '$epochs')"
  [ "$epochs" -le 20 ] || echo "accuracy-table.sh: note: --epochs $epochs is above the 20 epochs the targets allow" >&2
fi
IFS=, read -r -a dataset_list <<<"$datasets"
IFS=, read -r -a seed_list <<<"$seeds"
for dataset in "${dataset_list[@]}"; do
  case $dataset in
    fashion-mnist) dir=$fashion_dir option=--fashion ;;
    mnist) dir=$mnist_dir option=--mnist ;;
    *) usage_error "--datasets: unknown data set '$dataset' (available: fashion-mnist, mnist)" ;;
  esac
  [ -d "$dir" ] || usage_error "$dataset: no directory $dir (give $option DIR, the directory of its IDX files)"
done
if [ -z "$out" ]; then
  out=$(mktemp -d "${TMPDIR:-/tmp}/accuracy-table.XXXXXX")
else
  mkdir -p "$out"
fi
read -r -a launch <<<"$launcher"

# The tool's own arguments; the run directory and the data set's are added per run.
common=(--model "$model" --quiet --checkpoint-every 0)
[ -n "$epochs" ] && common+=(--epochs "$epochs")

# One run's numbers from its metrics.csv, the columns found by name (docs/LOGS.md):
#   final_percent epochs total_seconds reached_epoch seconds_to_target   (reached_epoch 0: not reached)
# Accuracies are counts of test images over the test set, compared as integers in 1/100 of a percent.
# The seconds keep every digit (%.17g): the table rounds them once, to 1/100 s. Rounded to 1/1000 here
# first, a sum such as 5.53502 became 5.535 and then 5.53 (5.535 lies just below in binary), where
# the test, rounding once, said 5.54.
run_numbers() {
  awk -F, -v target="$2" '
    NR == 1 { for (i = 1; i <= NF; ++i) column[$i] = i; next }
    {
      hundredths = int($column["test_accuracy"] * 10000 + 0.5)
      total += $column["epoch_seconds"]
      if (!reached && hundredths >= int(target * 100 + 0.5)) { reached = $column["epoch"]; to_target = total }
      final = hundredths; epochs = $column["epoch"]
    }
    END { printf "%.2f %d %.17g %d %.17g\n", final / 100, epochs, total, reached, to_target }' "$1"
}

table=$out/table.md
rows=()
failed=0
ran_on=
for dataset in "${dataset_list[@]}"; do
  if [ "$dataset" = fashion-mnist ]; then
    dir=$fashion_dir format=fashion target=$fashion_target
  else
    dir=$mnist_dir format=mnist target=$mnist_target
  fi
  sum=0 reached_runs=0 sum_to_target=0 sum_total=0 finished=0
  for seed in "${seed_list[@]}"; do
    run=$out/$dataset-seed$seed
    [ -e "$run" ] && usage_error "$run exists: give another --out (runs are never overwritten)"
    echo "accuracy-table.sh: $dataset seed $seed -> $run" >&2
    if ! "${launch[@]}" "$binary" "${common[@]}" --dataset "$format" --data "$dir" --seed "$seed" --out "$run" \
      "${extra[@]}" >"$run.log" 2>&1; then
      echo "accuracy-table.sh: $dataset seed $seed failed; the end of $run.log:" >&2
      tail -5 "$run.log" >&2
      rows+=("| $dataset | $seed | | run failed (${run}.log) | ≥ $target% | | | |")
      failed=1
      continue
    fi
    [ -n "$ran_on" ] || ran_on=$(grep -m1 '^rank 0/' "$run.log" | sed 's/, ops .*//' || true)
    read -r final run_epochs total reached to_target < <(run_numbers "$run/metrics.csv" "$target")
    finished=$((finished + 1))
    sum=$(awk -v a="$sum" -v b="$final" 'BEGIN { print a + b }')
    sum_total=$(awk -v a="$sum_total" -v b="$total" 'BEGIN { print a + b }')
    if [ "$reached" -gt 0 ]; then
      reached_runs=$((reached_runs + 1))
      sum_to_target=$(awk -v a="$sum_to_target" -v b="$to_target" 'BEGIN { print a + b }')
      time_text=$(printf '%.2f s (epoch %d)' "$to_target" "$reached")
    else
      time_text="not reached"
    fi
    verdict=$(awk -v a="$final" -v t="$target" 'BEGIN { print (int(a * 100 + 0.5) >= int(t * 100 + 0.5)) ? "reached" : "below" }')
    rows+=("| $dataset | $seed | $run_epochs | $final% | ≥ $target% | $verdict | $time_text | $(printf '%.2f s' "$total") |")
  done
  if [ "$finished" -gt 0 ]; then
    mean=$(awk -v s="$sum" -v n="$finished" 'BEGIN { printf "%.2f", s / n }')
    # The mean of accuracies in 1/100 % against the target, exactly: sum >= n * target.
    pass=$(awk -v s="$sum" -v n="$finished" -v t="$target" \
      'BEGIN { print (int(s * 100 + 0.5) >= n * int(t * 100 + 0.5)) ? "pass" : "fail" }')
    [ "$finished" -eq "${#seed_list[@]}" ] || pass="fail ($finished of ${#seed_list[@]} runs finished)"
    if [ "$reached_runs" -eq "$finished" ]; then
      mean_time=$(awk -v s="$sum_to_target" -v n="$finished" 'BEGIN { printf "%.2f s", s / n }')
    else
      mean_time="not reached in $((finished - reached_runs)) of $finished"
    fi
    mean_total=$(awk -v s="$sum_total" -v n="$finished" 'BEGIN { printf "%.2f s", s / n }')
    rows+=("| **$dataset** | mean | | **$mean%** | ≥ $target% | **$pass** | $mean_time | $mean_total |")
  fi
done

{
  echo "### $model: final test accuracy over seeds ${seeds//,/, }"
  echo
  echo "- command: ${launcher:+$launcher }$binary ${common[*]} --dataset DATASET --data DIR --seed SEED --out RUN${extra[*]:+ ${extra[*]}}"
  echo "- ran on: ${ran_on:-no run finished}"
  echo "- time to target: the training steps' wall time (metrics.csv's epoch_seconds; evaluation, checkpoints and"
  echo "  start-up excluded) summed over the epochs up to the first whose test accuracy reached the target;"
  echo "  the pass/fail verdict is on the mean of the final epochs' accuracies. Runs: $out"
  echo
  echo "| data set | seed | epochs | final test accuracy | target | result | time to target | training time, all epochs |"
  echo "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |"
  printf '%s\n' "${rows[@]}"
} | tee "$table"
exit "$failed"
