"""bench/ingest: see run.sh. Prints a Markdown table of the measurements."""

import glob
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
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


def lake_ids(uri):
    """The ids the reference reader reads in the Hudi table at `uri`."""
    import pyarrow as pa
    from hudi import HudiReadOptions, HudiTableBuilder
    batches = HudiTableBuilder.from_base_uri(uri).build().read(HudiReadOptions())
    return set(pa.Table.from_batches(batches).column("id").to_pylist()) if batches else set()


def flush_lags(port, lake, stop):
    """While `stop` is unset: every 250 ms a one-row transaction into the small buffered table
    `markers`, and the time until the reference reader reads its row (the same worker flushes
    it and the loaded table)."""
    lags = []
    with connect(port) as conn:
        n = 0
        while not stop.is_set():
            n += 1
            conn.execute(f"INSERT INTO markers VALUES ({n}, 'm', 'amsterdam', 1, 1, 1, true, date '2026-01-01', 'x', now())")
            committed = time.perf_counter()
            while n not in lake_ids(f"file://{lake}/markers"):
                time.sleep(0.01)
            lags.append(time.perf_counter() - committed)
            time.sleep(0.25)
    return lags


def buffered_table(conn, name, buckets):
    """A Hudi table `name` with write_mode 'buffered', keyed by id (the worker flushes it)."""
    conn.execute(f"CREATE FOREIGN TABLE {name} ({COLUMNS}) SERVER lake OPTIONS (path '{name}', primary_key 'id', "
                 f"ordering_field 'ts', buckets '{buckets}', services 'off', write_mode 'buffered')")
    conn.execute(f"SELECT hudi.create_table('{name}')")


def main():
    args = arguments(0)
    with connect(args.port) as conn:
        create_tables(conn, args.lake, "direct")
        conn.execute("CREATE SEQUENCE ids")
        buffered_table(conn, "buffered", 16)
        buffered_table(conn, "markers", 1)
        results = {"heap": pgbench(args.port, "heap", CLIENTS, SECONDS)}
        stop = threading.Event()
        lags = []
        marker = threading.Thread(target=lambda: lags.extend(flush_lags(args.port, args.lake, stop)))
        marker.start()
        results["buffered"] = pgbench(args.port, "buffered", CLIENTS, SECONDS)
        stop.set()
        marker.join()
        results["direct"] = pgbench(args.port, "direct", CLIENTS, 5)
        # A heap table mirrored into a third buffered Hudi table.
        conn.execute(f"CREATE TABLE mirrored ({COLUMNS}, PRIMARY KEY (id))")
        buffered_table(conn, "mirror_target", 16)
        conn.execute("SELECT hudi.mirror('mirrored', 'mirror_target')")
        results["heap with a mirror"] = pgbench(args.port, "mirrored", CLIENTS, SECONDS)
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
    lags.sort()
    print(f"flush lag (commit to the reference reader, {len(lags)} marker rows during the buffered run): "
          f"median {lags[len(lags) // 2]:.2f} s, p99 {lags[int(len(lags) * 0.99)]:.2f} s, max {lags[-1]:.2f} s")


if __name__ == "__main__":
    main()
