"""How many cores the LIKE query of bench/scan keeps busy, serial and parallel, and its CPU per
query, from /proc/stat around runs of each mode (the whole machine: run it on an idle one).

Three modes: the serial scan (its helper threads decode the next slices on the other cores),
the serial scan without read-ahead (the backend decodes each slice itself: one core), and the
parallel scan with 2 workers. On a machine of `cores` cores the parallel time is at best the
serial CPU over `cores`: the lower bound printed for the parallel over the serial time.

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
    modes = {
        "serial": (0, "DEFAULT"),
        "serial, no read-ahead": (0, "0"),
        "parallel, 2 workers": (2, "DEFAULT"),
    }
    cores_online = os.cpu_count()
    for _ in range(args.alternations):
        medians, cpus = {}, {}
        for mode, (workers, read_ahead) in modes.items():
            conn.execute(f"SET max_parallel_workers_per_gather = {workers}")
            conn.execute(f"SET hudi.read_ahead_slices = {read_ahead}")
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
            medians[mode], cpus[mode] = statistics.median(times), cpu
            print(f"{mode}: median {medians[mode]:.3f} s, {cores:.2f} cores busy, {cpu:.3f} s of CPU per query")
        bound = cpus["serial"] / cores_online / medians["serial"]
        print(f"parallel / serial {medians['parallel, 2 workers'] / medians['serial']:.2f}x (at best {bound:.2f}x "
              f"on {cores_online} cores); parallel / serial without read-ahead "
              f"{medians['parallel, 2 workers'] / medians['serial, no read-ahead']:.2f}x")


if __name__ == "__main__":
    main()
