#!/usr/bin/env python3
"""Prints one line per kernel launch from `ncu --csv --metrics gpu__time_duration.sum` output:
launch id, kernel (template arguments and parameters stripped), grid, block, microseconds.

  ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      ./build/tests/gpu_backend --run_test=profile_steps > ncu.csv
  python3 kernels/bench/ncu_durations.py ncu.csv
"""
import csv
import re
import sys


def short(name: str) -> str:
    name = re.sub(r"\(.*$", "", name)          # parameters
    while "<" in name:                          # template arguments, innermost first
        name = re.sub(r"<[^<>]*>", "", name)
    return name.split("::")[-1]


def main(path: str) -> None:
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "ns")
        us = value / 1000.0 if unit in ("nsecond", "ns") else value * (1000.0 if unit in ("msecond", "ms") else 1.0)
        print(f'{row["ID"]:>4} {short(row["Kernel Name"]):<34} grid {row.get("Grid Size", "?"):<16} '
              f'block {row.get("Block Size", "?"):<12} {us:9.1f} us')


if __name__ == "__main__":
    main(sys.argv[1])
