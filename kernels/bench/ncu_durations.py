#!/usr/bin/env python3
"""Prints one line per kernel launch from `ncu --csv --metrics gpu__time_duration.sum[,...]` output:
launch id, kernel (template arguments and parameters stripped), grid, block, microseconds, and any
further metrics asked for (their short names in a header line).

  ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      ./build/tests/gpu_backend --run_test=profile_steps > ncu.csv
  python3 kernels/bench/ncu_durations.py ncu.csv
"""
import csv
import re
import sys

# Short column names for the metrics the device scripts ask for; others print under their own name.
SHORT = {
    "launch__registers_per_thread": "regs",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occ%",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm%",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram%",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "fma%",
    "l1tex__throughput.avg.pct_of_peak_sustained_active": "l1%",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "l2%",
}


def short(name: str) -> str:
    name = re.sub(r"\(.*$", "", name)          # parameters
    while "<" in name:                          # template arguments, innermost first
        name = re.sub(r"<[^<>]*>", "", name)
    return name.split("::")[-1]


def microseconds(row) -> float:
    value = float(row["Metric Value"].replace(",", ""))
    unit = row.get("Metric Unit", "ns")
    return value / 1000.0 if unit in ("nsecond", "ns") else value * (1000.0 if unit in ("msecond", "ms") else 1.0)


def main(path: str) -> None:
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    launches = {}  # id -> (name, grid, block, {metric: text})
    extra = []
    for row in csv.DictReader(lines):
        metric = row.get("Metric Name")
        launch = launches.setdefault(row["ID"], (short(row["Kernel Name"]), row.get("Grid Size", "?"),
                                                 row.get("Block Size", "?"), {}))
        if metric == "gpu__time_duration.sum":
            launch[3][metric] = f"{microseconds(row):9.1f} us"
        else:
            if metric not in extra:
                extra.append(metric)
            launch[3][metric] = row["Metric Value"]
    if extra:
        print("# columns after us: " + " ".join(SHORT.get(m, m) for m in extra))
    for launch_id, (name, grid, block, values) in launches.items():
        cells = " ".join(f"{values.get(m, '-'):>6}" for m in extra)
        print(f'{launch_id:>4} {name:<34} grid {grid:<16} block {block:<12} '
              f'{values.get("gpu__time_duration.sum", "?"):>12} {cells}')


if __name__ == "__main__":
    main(sys.argv[1])
