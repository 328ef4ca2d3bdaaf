#!/usr/bin/env python3
"""Checks the flight recorder files of a job that a stopped rank hung (tests/flight_recorder_test.sh).

Usage: check_flight.py FLIGHT_DIR RANKS WAITED_SEQ STOPPED_RANK REPORTING_RANK [BLOCKED_RANKS]

Every rank but STOPPED_RANK must have written FLIGHT_DIR/rank-N.txt (docs/RELIABILITY.md, "Flight
recorder"): the header names its rank, host, pid and the job's start (the same for all); then the
column line, then at most 64 calls with consecutive numbers; a number means the same call (op and
bytes) on every rank. The reporting rank's newest call is WAITED_SEQ, in flight. The other waiting
ranks had entered WAITED_SEQ: once the launcher wakes the stopped rank to end it, they may finish
that call before they are killed, and one more silence may rewrite their file with the next call.
BLOCKED_RANKS (a comma list) are ranks the reporting rank named beside the stopped one: the stopped
rank froze inside collective WAITED_SEQ - 1, after some ranks had finished it and before these had,
so each of them shows WAITED_SEQ - 1 in flight as its newest call (or, woken as above, a later one).
Prints one line per problem and exits 1 if there is any.
"""
import re
import sys

OPS = {"allreduce", "iallreduce", "bcast", "barrier", "gather", "gatherv", "allgather", "comm_split",
       "dev_allreduce", "dev_bcast"}
STATUSES = {"in-flight", "done", "failed", "queued"}
TITLE = "# cnn_mpi flight recorder: the last collective calls of one rank, oldest first"


def read(path, rank, ranks, waited, reporter, blocked, problems):
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        problems.append(f"{path}: {e.strerror}")
        return None
    if not lines or lines[0] != TITLE:
        problems.append(f"{path}: no title line")
        return None
    header, calls, columns = {}, [], False
    for line in lines[1:]:
        if line.startswith("# columns: "):
            columns = True
        elif line.startswith("#"):
            if ": " in line and not columns:
                key, value = line[2:].split(": ", 1)
                header[key] = value
        else:
            calls.append(line)
    if not columns or not lines[len(lines) - len(calls) - 1].startswith("#     seq  op"):
        problems.append(f"{path}: no column lines before the calls")
    for key in ("rank", "host", "pid", "run", "written", "why", "entered", "phase", "global_step", "heartbeats"):
        if key not in header:
            problems.append(f"{path}: header has no '{key}'")
    if header.get("rank") != f"{rank} of {ranks}":
        problems.append(f"{path}: rank '{header.get('rank')}', expected '{rank} of {ranks}'")
    if not re.fullmatch(r"[0-9]+", header.get("pid", "")) or not header.get("host"):
        problems.append(f"{path}: pid '{header.get('pid')}', host '{header.get('host')}'")
    entered = int(header["entered"]) if header.get("entered", "").isdigit() else -1
    first = waited - 1 if rank in blocked else waited
    if entered != waited if rank == reporter else not first <= entered <= waited + 1:
        problems.append(f"{path}: entered {header.get('entered')}, expected {waited}"
                        + (f" or {first}" if first != waited else ""))
    rows = []
    for line in calls:
        f = line.split(None, 8)
        if len(f) < 9 or f[1] not in OPS or f[7] not in STATUSES:
            problems.append(f"{path}: malformed call line '{line}'")
            continue
        seq, op, nbytes, step, start, end, ms, status, phase = f
        if (end == "-") != (status == "in-flight"):
            problems.append(f"{path}: end '{end}' with status {status}: '{line}'")
        try:
            float(start), float(ms), int(step), int(nbytes)
            if end != "-" and float(end) < float(start):
                problems.append(f"{path}: ends before it starts: '{line}'")
        except ValueError:
            problems.append(f"{path}: a number that is not one: '{line}'")
        rows.append((int(seq), op, nbytes, status, phase))
    if not 1 <= len(rows) <= 64:
        problems.append(f"{path}: {len(rows)} calls, expected 1 to 64")
        return header.get("run"), {}
    if [r[0] for r in rows] != list(range(rows[0][0], rows[0][0] + len(rows))):
        problems.append(f"{path}: sequence numbers not consecutive")
    if rows[-1][0] != entered:
        problems.append(f"{path}: newest call {rows[-1][0]}, but entered {entered}")
    if (rank == reporter or entered < waited) and rows[-1][3] != "in-flight":
        problems.append(f"{path}: newest call {rows[-1][0]} {rows[-1][3]}, expected in flight")
    if entered >= waited and waited not in [r[0] for r in rows]:
        problems.append(f"{path}: no call #{waited}")
    return header.get("run"), {r[0]: (r[1], r[2]) for r in rows}


def main():
    flight_dir, ranks, waited, stopped, reporter = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    blocked = {int(r) for r in sys.argv[6].split(",") if r} if len(sys.argv) > 6 else set()
    problems, runs, calls = [], set(), {}
    if blocked & {stopped, reporter}:
        problems.append(f"blocked ranks {sorted(blocked)} include the stopped or the reporting rank")
    for rank in range(ranks):
        if rank == stopped:
            continue
        got = read(f"{flight_dir}/rank-{rank}.txt", rank, ranks, waited, reporter, blocked, problems)
        if got is None:
            continue
        runs.add(got[0])
        for seq, call in got[1].items():
            calls.setdefault(seq, {})[rank] = call
    if len(runs) > 1:
        problems.append(f"the files name {len(runs)} different starts of the job: {sorted(runs)}")
    for seq, by_rank in sorted(calls.items()):
        if len(set(by_rank.values())) > 1:
            problems.append(f"call #{seq} differs between ranks: {by_rank}")
    for p in problems:
        print(p)
    if problems:
        return 1
    who = "all" if not blocked else f"all but rank(s) {', '.join(map(str, sorted(blocked)))} (inside #{waited - 1})"
    print(f"{ranks - 1} rings, {len(calls)} calls agree across ranks, {who} entered #{waited}, rank {reporter} waits in it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
