#!/usr/bin/python3
"""Checks a run directory's logs (docs/LOGS.md) and exits 1 naming every failure.
  check_logs.py RUN_DIR EPOCHS RANKS [TOLERANCE]
- metrics.csv, timing.csv (and allreduce.csv for RANKS > 1) parse, with their documented headers;
- exactly epochs 1..EPOCHS, each once (no rows duplicated by a resume);
- per epoch every phase and the "step" row, with min <= mean <= max and max_rank < RANKS;
- the step phases (data+h2d+forward+backward+allreduce+update) add up to the step row within TOLERANCE;
- busbw = algbw * 2(n-1)/n; overlap_fraction = 1 - exposed_s/mean_s (0, and exposed = mean, for plain steps)."""
import csv
import sys

METRICS = "epoch,train_loss,test_loss,test_accuracy,images_per_s,epoch_seconds,wall_seconds,skipped_steps".split(",")
TIMING = "epoch,phase,min_s,mean_s,max_s,max_rank".split(",")
ALLREDUCE = ("epoch,ranks,bytes_per_step,steps,mean_s,algbw_GBps,busbw_GBps,overlap,buckets,exposed_s,"
             "overlap_fraction").split(",")
PHASES = ["data", "h2d", "forward", "backward", "allreduce", "update", "eval", "checkpoint"]
STEP_PHASES = ["data", "h2d", "forward", "backward", "allreduce", "update"]
RELATIVE_EPS = 1e-5  # the CSV keeps 6 significant digits

failures = []


def check(ok, message):
    if not ok:
        failures.append(message)


def read(path, header):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        check(reader.fieldnames == header, "%s: header %s, expected %s" % (path, reader.fieldnames, header))
        return list(reader)


def main():
    run, epochs, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    tolerance = float(sys.argv[4]) if len(sys.argv) > 4 else 0.10
    metrics = read(run + "/metrics.csv", METRICS)
    check([int(r["epoch"]) for r in metrics] == list(range(1, epochs + 1)),
          "metrics.csv epochs %s, expected 1..%d once each" % ([r["epoch"] for r in metrics], epochs))
    for r in metrics:
        check(float(r["epoch_seconds"]) > 0 and float(r["images_per_s"]) > 0, "metrics.csv row %s" % r)
    timing = read(run + "/timing.csv", TIMING)
    rows = {}
    for r in timing:
        key = (int(r["epoch"]), r["phase"])
        check(key not in rows, "timing.csv: %s twice" % (key,))
        rows[key] = r
        lo, mean, hi = float(r["min_s"]), float(r["mean_s"]), float(r["max_s"])
        check(lo <= mean * (1 + RELATIVE_EPS) and mean <= hi * (1 + RELATIVE_EPS) and lo >= 0,
              "timing.csv: not min <= mean <= max: %s" % r)
        check(0 <= int(r["max_rank"]) < ranks, "timing.csv: max_rank out of range: %s" % r)
    for epoch in range(1, epochs + 1):
        for phase in PHASES + ["step"]:
            check((epoch, phase) in rows, "timing.csv: epoch %d lacks %s" % (epoch, phase))
        if (epoch, "step") not in rows:
            continue
        step = float(rows[(epoch, "step")]["mean_s"])
        phases = sum(float(rows[(epoch, p)]["mean_s"]) for p in STEP_PHASES if (epoch, p) in rows)
        check(step > 0 and abs(phases - step) <= tolerance * step,
              "epoch %d: phases add up to %.4f s, step wall time %.4f s (more than %.0f%% apart)" %
              (epoch, phases, step, 100 * tolerance))
        print("epoch %d: step phases %.4f s vs step %.4f s (%+.1f%%)" % (epoch, phases, step,
                                                                       100 * (phases - step) / step))
    if ranks > 1:
        allreduce = read(run + "/allreduce.csv", ALLREDUCE)
        check([int(r["epoch"]) for r in allreduce] == list(range(1, epochs + 1)),
              "allreduce.csv epochs %s" % [r["epoch"] for r in allreduce])
        for r in allreduce:
            n, alg, bus = int(r["ranks"]), float(r["algbw_GBps"]), float(r["busbw_GBps"])
            check(n == ranks and int(r["bytes_per_step"]) > 0 and int(r["steps"]) > 0 and alg > 0,
                  "allreduce.csv row %s" % r)
            check(abs(bus - alg * 2 * (n - 1) / n) <= 1e-4 * max(bus, 1e-12), "busbw != algbw*2(n-1)/n: %s" % r)
            mean, exposed, fraction = float(r["mean_s"]), float(r["exposed_s"]), float(r["overlap_fraction"])
            check(r["overlap"] in ("0", "1") and int(r["buckets"]) >= 1 and exposed >= 0 and 0 <= fraction <= 1,
                  "allreduce.csv overlap columns: %s" % r)
            check(abs(fraction - max(0.0, 1 - exposed / mean)) <= 1e-4 if mean > 0 else fraction == 0,
                  "overlap_fraction != 1 - exposed_s/mean_s: %s" % r)
            check(r["overlap"] == "1" or (fraction == 0 and abs(exposed - mean) <= 1e-5 * max(mean, 1e-12)),
                  "a plain step's exposed_s must equal mean_s: %s" % r)
    for f in failures:
        print("FAIL: " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
