"""bench/ingest: see run.sh. Prints a Markdown table of the measurements."""

import glob
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from benchlib import COLUMNS, arguments, connect, create_tables  # noqa: E402

PGBENCH = "/usr/lib/postgresql/15/bin/pgbench"
CLIENTS = 8
SECONDS = 20
ROW = ("nextval('ids'), 'name', 'amsterdam', 1.5, 1, 0.5, true, date '2026-01-01', 'x', now()")


def pgbench(port, table, clients, seconds):
    """tps, mean and p99 latency (ms) of `clients` sessions inserting one row per transaction."""
    with tempfile.TemporaryDirectory() as work:
        os.chmod(work, 0o777)
        script = pathlib.Path(work) / "insert.sql"
        script.write_text(f"INSERT INTO {table} VALUES ({ROW});\n")
        out = subprocess.run([PGBENCH, "-n", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-c", str(clients),
                              "-j", "2", "-T", str(seconds), "-f", str(script), "-l", "--log-prefix", f"{work}/log", "postgres"],
                             check=True, capture_output=True, text=True).stdout
        tps = float(re.search(r"tps = ([\d.]+)", out).group(1))
        latencies = sorted(int(line.split()[2]) for path in glob.glob(f"{work}/log*") for line in open(path))
    mean = sum(latencies) / len(latencies) / 1000
    p99 = latencies[int(len(latencies) * 0.99)] / 1000
    return tps, mean, p99


def main():
    args = arguments(0)
    with connect(args.port) as conn:
        create_tables(conn, args.lake, "direct")
        conn.execute("CREATE SEQUENCE ids")
        conn.execute(f"CREATE FOREIGN TABLE buffered ({COLUMNS}) SERVER lake OPTIONS (path 'buffered', primary_key 'id', "
                     "ordering_field 'ts', buckets '16', services 'off', write_mode 'buffered')")
        conn.execute("SELECT hudi.create_table('buffered')")
        results = {name: pgbench(args.port, name, CLIENTS, SECONDS) for name in ("heap", "buffered")}
        results["direct"] = pgbench(args.port, "direct", CLIENTS, 5)
        committed = conn.execute("SELECT count(*) FROM buffered").fetchone()[0]
        started = time.perf_counter()
        while conn.execute("SELECT COALESCE(sum(rows), 0) FROM hudi.buffered_writes").fetchone()[0] > 0:
            time.sleep(0.05)
        drained = time.perf_counter() - started
        flushes = len(glob.glob(f"{args.lake}/buffered/.hoodie/timeline/*.deltacommit"))
    heap_tps, heap_mean, heap_p99 = results["heap"]
    print(f"{CLIENTS} pgbench clients, one-row INSERT transactions, {SECONDS} s each (direct: 5 s)\n")
    print("| table | tps | vs heap | mean latency (ms) | p99 latency (ms) | p99 vs heap |")
    print("|---|---|---|---|---|---|")
    for name, (tps, mean, p99) in results.items():
        print(f"| {name} | {tps:,.0f} | {tps / heap_tps:.3f}x | {mean:.2f} | {p99:.2f} | {p99 / heap_p99:.2f}x |")
    print(f"\nbuffered: {committed:,} rows in {flushes} deltacommits; the buffer was empty {drained:.2f} s after the run")


if __name__ == "__main__":
    main()
