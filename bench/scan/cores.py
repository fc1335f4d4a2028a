"""How many cores the LIKE query of bench/scan keeps busy, serial and parallel, and its CPU per
query, from /proc/stat around runs of each mode (the whole machine: run it on an idle one).

After `bash bench/scan/run.sh`, with its cluster started again on the same lake:

    scripts/cluster.sh start build/bench-scan
    build/venv/bin/python bench/scan/cores.py --port $(cat build/bench-scan/port)
    scripts/cluster.sh stop build/bench-scan
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench import LIKE_QUERY  # noqa: E402
from benchlib import connect  # noqa: E402


def busy_and_idle():
    """Jiffies of the whole machine: (busy, idle)."""
    with open("/proc/stat") as stat:
        user, nice, system, idle, iowait, irq, softirq, *_ = map(int, stat.readline().split()[1:])
    return user + nice + system + irq + softirq, idle + iowait


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--alternations", type=int, default=3)
    args = parser.parse_args()
    hz = os.sysconf("SC_CLK_TCK")
    query = LIKE_QUERY.format("scan")
    conn = connect(args.port)
    # Not prepared: a prepared statement would keep the plan of the first mode.
    conn.prepare_threshold = None
    for _ in range(args.alternations):
        for workers in (0, 2):
            conn.execute(f"SET max_parallel_workers_per_gather = {workers}")
            conn.execute(query).fetchall()
            busy, idle = busy_and_idle()
            started = time.perf_counter()
            times = []
            for _ in range(args.runs):
                began = time.perf_counter()
                conn.execute(query).fetchall()
                times.append(time.perf_counter() - began)
            elapsed = time.perf_counter() - started
            busy_after, _ = busy_and_idle()
            cores = (busy_after - busy) / hz / elapsed
            cpu = (busy_after - busy) / hz / args.runs
            print(f"workers {workers}: median {statistics.median(times):.3f} s, {cores:.2f} cores busy, "
                  f"{cpu:.3f} s of CPU per query")


if __name__ == "__main__":
    main()
